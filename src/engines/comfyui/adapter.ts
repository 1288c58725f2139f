import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import WebSocket from 'ws';
import { EngineError } from '../types.js';
import { Deadline, roomOnRunner, withinLimit } from './admission.js';
import { type PromptRefusalBody, promptRefusal } from './refusal.js';
import type { Workflow } from './workflows.js';

export { ModelMissingError } from './refusal.js';

/** A ComfyUI server as Kiln drives it. */
export interface RunnerTarget {
  readonly name: string;
  readonly url: string;
  /** How long a prompt may take once the runner has room for it. */
  readonly timeoutMs: number;
  /** Prompts the runner may hold at once, anyone's (admission.ts); unset, Kiln does not look. */
  readonly maxConcurrency?: number;
}

export interface InputImage {
  /** The template placeholder it fills, e.g. `start_image`. */
  param: string;
  data: Buffer;
  contentType: string;
}

export interface OutputFile {
  filename: string;
  data: Buffer;
  contentType: string;
}

/** Headers every request of a run carries (the trace context). */
type RunnerHeaders = Readonly<Record<string, string>>;

/** A connection failure to the runner, before it ran anything (an abort stays an abort). */
const unreachable = (runner: RunnerTarget, signal?: AbortSignal) => (error: unknown) => {
  if (signal?.aborted) throw signal.reason;
  throw new EngineError(
    `cannot reach runner ${runner.name}: ${(error as Error).message}`,
    'unavailable',
    true,
  );
};

/** How long `POST /prompt` may take: ComfyUI only validates and queues before it answers. */
const SUBMIT_TIMEOUT_MS = 60_000;
/** How long each call taking a prompt back from the runner may take. */
const WITHDRAW_TIMEOUT_MS = 5_000;
/**
 * Longest wait for the runner to take the progress socket: without it the history poll still finds
 * the result, so a runner that never answers the upgrade costs this once, not the job.
 */
const SOCKET_OPEN_TIMEOUT_MS = 10_000;

const extension = (contentType: string) =>
  contentType === 'image/jpeg' ? 'jpg' : contentType === 'image/webp' ? 'webp' : 'png';

const CONTENT_TYPES: Record<string, string> = {
  webm: 'video/webm',
  mp4: 'video/mp4',
  gif: 'image/gif',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
};

/**
 * Runs one workflow on a ComfyUI runner: uploads the input images, listens on `/ws` with its own
 * client id before submitting (run messages go only to that socket), submits with `POST /prompt`,
 * follows progress, falls back on `GET /history/{id}` if the socket goes quiet, then fetches the
 * output files with `GET /view`. An abort takes the prompt back from the runner: deleted from its
 * queue while pending, interrupted while running (withdrawPrompt).
 */
export async function runWorkflow(
  runner: RunnerTarget,
  call: {
    /** The filled workflow, given the names the runner gave the uploaded images. */
    fill: (uploaded: Record<string, string>) => Workflow;
    images: InputImage[];
    outputNode: string;
    signal: AbortSignal;
    onProgress?: (fraction: number) => void;
    /** Headers every request to the runner carries: the W3C trace context. */
    headers?: RunnerHeaders;
  },
): Promise<OutputFile[]> {
  const base = runner.url.replace(/\/+$/, '');
  const headers = call.headers ?? {};
  const clientId = randomUUID();
  const limit = runner.maxConcurrency;
  // The runner's timeout counts while Kiln has work on the runner, not while it waits for room.
  const deadline = new Deadline(runner.timeoutMs);
  const signal = AbortSignal.any([call.signal, deadline.signal]);
  if (limit !== undefined) await roomOnRunner(base, headers, limit, call.signal);
  deadline.start();
  try {
    return await runAdmitted(runner, call, { base, headers, clientId, limit, deadline, signal });
  } finally {
    deadline.stop();
  }
}

/** The run once the runner has room for it: `runWorkflow` from the uploads on. */
async function runAdmitted(
  runner: RunnerTarget,
  call: Parameters<typeof runWorkflow>[1],
  run: {
    base: string;
    headers: RunnerHeaders;
    clientId: string;
    limit: number | undefined;
    deadline: Deadline;
    signal: AbortSignal;
  },
): Promise<OutputFile[]> {
  const { base, headers, clientId, limit, deadline, signal } = run;
  /** The prompt this run has on the runner: a new one for each submission. */
  let promptId = randomUUID();

  const uploaded: Record<string, string> = {};
  for (const image of call.images) {
    const form = new FormData();
    form.append(
      'image',
      new Blob([image.data], { type: image.contentType }),
      `kiln-${randomUUID()}.${extension(image.contentType)}`,
    );
    form.append('type', 'input');
    form.append('overwrite', 'false');
    const response = await fetch(`${base}/upload/image`, {
      method: 'POST',
      headers,
      body: form,
      signal,
    }).catch(unreachable(runner, signal));
    if (!response.ok)
      throw new EngineError(
        `runner ${runner.name} refused an input image: HTTP ${response.status}`,
        'broken',
        true,
      );
    const { name, subfolder } = (await response.json()) as { name: string; subfolder?: string };
    uploaded[image.param] = subfolder ? `${subfolder}/${name}` : name;
  }

  const graph = call.fill(uploaded);
  const progress = passProgress(graph);
  const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/ws?clientId=${clientId}`, {
    headers,
    handshakeTimeout: SOCKET_OPEN_TIMEOUT_MS,
  });
  const finished = new Promise<Outcome>((resolve) => {
    socket.on('message', (raw, binary) => {
      if (binary) return; // previews
      let message: { type: string; data: Record<string, unknown> };
      try {
        message = JSON.parse(raw.toString());
      } catch {
        return;
      }
      if (message.data?.prompt_id !== promptId) return;
      if (message.type === 'progress') {
        const { value, max, node } = message.data as { value: number; max: number; node?: unknown };
        if (max > 0) call.onProgress?.(progress(node, value / max));
      } else if (message.type === 'execution_success') resolve('success');
      else if (message.type === 'execution_error') resolve({ error: describeFailure(message.data) });
      else if (message.type === 'execution_interrupted') resolve('interrupted');
    });
  });
  await new Promise<void>((resolve) => {
    const settle = () => {
      signal.removeEventListener('abort', settle);
      resolve();
    };
    socket.once('open', settle);
    // Without the socket (refused, or not taken within its timeout) the history poll still finds
    // the result; an error later, or on terminating it while it connects, is as harmless. A cancel
    // or the runner's timeout meanwhile ends the wait.
    socket.on('error', settle);
    signal.addEventListener('abort', settle, { once: true });
  });

  if (signal.aborted) {
    socket.terminate();
    throw signal.reason;
  }

  // Once POST /prompt is sent the runner may hold the prompt: an abort from then on takes it back
  // (withdrawPrompt), after the submission has settled so the runner knows the id, and the run
  // ends only when the runner has been told.
  const submit = () =>
    request(`${base}/prompt`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: graph, client_id: clientId, prompt_id: promptId }),
      signal: AbortSignal.timeout(SUBMIT_TIMEOUT_MS),
    });
  /** The submission of the prompt the runner may hold; undefined while it holds none of this run's. */
  let submission: ReturnType<typeof submit> | undefined;
  let withdrawal: Promise<void> | undefined;
  let stopWaiting: (reason: unknown) => void = () => undefined;
  const aborted = new Promise<never>((_, reject) => {
    stopWaiting = reject;
  });
  aborted.catch(() => undefined);
  const onAbort = () => {
    const sent = submission;
    const id = promptId;
    if (sent) {
      const withdraw = () => withdrawPrompt(base, id, headers);
      withdrawal = sent.then((answer) => {
        void answer.body.dump().catch(() => undefined);
        return withdraw();
      }, withdraw);
    }
    stopWaiting(signal.reason);
  };
  signal.addEventListener('abort', onAbort, { once: true });
  // Ends the history backstop once the run is over, however it ended.
  const over = new AbortController();

  try {
    for (;;) {
      submission = submit();
      const submitted = await Promise.race([submission, aborted]).catch(unreachable(runner, signal));
      const text = await submitted.body.text();
      if (submitted.statusCode >= 400) throw promptRefusal(parseRefusal(text, submitted.statusCode));
      if (limit === undefined || (await withinLimit(base, promptId, headers, limit, signal))) break;
      // Another process's prompt took the room at the same moment, ahead of this one: this one
      // is taken back before it runs, and waits for room again, off the clock.
      deadline.stop();
      submission = undefined;
      await withdrawPrompt(base, promptId, headers);
      await roomOnRunner(base, headers, limit, signal);
      deadline.start();
      promptId = randomUUID();
    }

    const backstop = historyDone(base, promptId, headers, AbortSignal.any([signal, over.signal]));
    const outcome = await Promise.race([finished, backstop, aborted]);
    if (outcome === 'interrupted')
      throw new EngineError(`runner ${runner.name} interrupted the prompt`, 'broken', false);
    if (typeof outcome === 'object')
      throw new EngineError(`runner ${runner.name}: ${outcome.error}`, 'broken', false);
    return await fetchOutputs(base, promptId, call.outputNode, headers, signal);
  } catch (error) {
    if (!signal.aborted) throw error;
    await withdrawal;
    throw signal.reason;
  } finally {
    over.abort();
    signal.removeEventListener('abort', onAbort);
    socket.terminate();
  }
}

type Outcome = 'success' | 'interrupted' | { error: string };

/** An `execution_error` as one line: the node, the exception type and its message. */
function describeFailure(data: Record<string, unknown> | undefined): string {
  if (!data) return 'the prompt failed';
  const { node_type, exception_type, exception_message } = data as {
    node_type?: string;
    exception_type?: string;
    exception_message?: string;
  };
  return `${node_type ?? 'a node'} failed: ${exception_type ?? ''} ${exception_message ?? ''}`.trim();
}

/** A 400's body; an answer that is not ComfyUI's JSON still says what the runner said. */
function parseRefusal(text: string, status: number): PromptRefusalBody {
  try {
    const body = JSON.parse(text) as unknown;
    if (typeof body === 'object' && body !== null) return body as PromptRefusalBody;
  } catch {
    // not JSON: aiohttp's plain text answers
  }
  return { error: { message: `HTTP ${status}`, details: text.slice(0, 500) } };
}

/**
 * Takes a prompt back from the runner. `POST /queue {"delete": [id]}` removes it while it is still
 * pending — ComfyUI's `/interrupt` ignores a pending prompt, and 0.3.64 has no `/api/jobs` (newer
 * builds' cancel is not needed: these two calls work on every version). Then, if `GET /queue`
 * shows it running, `POST /interrupt {"prompt_id": id}` stops it when its current node ends (a
 * sampler: at its next step). Deleting before looking leaves no moment in which it could start
 * unseen; naming the prompt keeps the interrupt off anyone else's. Best effort and bounded: the
 * runner may be gone.
 */
async function withdrawPrompt(base: string, promptId: string, headers: RunnerHeaders): Promise<void> {
  const call = async (path: string, method: 'GET' | 'POST', body?: unknown) => {
    const response = await request(`${base}${path}`, {
      method,
      ...(body === undefined
        ? { headers }
        : { body: JSON.stringify(body), headers: { ...headers, 'content-type': 'application/json' } }),
      signal: AbortSignal.timeout(WITHDRAW_TIMEOUT_MS),
    });
    return response.statusCode === 200 && method === 'GET' ? response.body.json() : response.body.dump();
  };
  try {
    await call('/queue', 'POST', { delete: [promptId] });
    const queue = (await call('/queue', 'GET')) as { queue_running?: unknown[] } | undefined;
    const running = (queue?.queue_running ?? []).some((item) => Array.isArray(item) && item[1] === promptId);
    if (running) await call('/interrupt', 'POST', { prompt_id: promptId });
  } catch {
    // The runner is unreachable or too slow: what it holds stays there; the job is over anyway.
  }
}

interface HistoryEntry {
  outputs?: Record<string, { images?: ViewRef[]; gifs?: ViewRef[] }>;
  status?: { status_str?: string; completed?: boolean; messages?: Array<[string, Record<string, unknown>]> };
}
interface ViewRef {
  filename: string;
  subfolder?: string;
  type?: string;
}

async function history(
  base: string,
  promptId: string,
  headers: RunnerHeaders,
  signal: AbortSignal,
): Promise<HistoryEntry | undefined> {
  const response = await request(`${base}/history/${promptId}`, { headers, signal });
  const body = (await response.body.json()) as Record<string, HistoryEntry>;
  return body[promptId];
}

/** Backstop polls in a row that find the runner unreachable, or the prompt nowhere, before the run fails. */
const LOST_POLLS = 3;

/**
 * The backstop: a prompt whose socket went quiet is done once its history says so. A runner that
 * restarted has no prompt in its queue nor in its history, and one that went away answers nothing:
 * either, for LOST_POLLS polls in a row (about 6 s), ends the run as failed rather than leaving it to
 * the runner's timeout (30 minutes by default) and blaming it on slowness.
 */
async function historyDone(
  base: string,
  promptId: string,
  headers: RunnerHeaders,
  signal: AbortSignal,
): Promise<Outcome> {
  let unreachable = 0;
  let missing = 0;
  for (;;) {
    await new Promise((r) => setTimeout(r, 2000));
    if (signal.aborted) throw signal.reason;
    let entry: HistoryEntry | undefined;
    try {
      entry = await history(base, promptId, headers, signal);
      // Absent from the history too: queued or running still, or lost with a restart?
      missing = entry || (await queued(base, promptId, headers, signal)) ? 0 : missing + 1;
      unreachable = 0;
    } catch {
      if (signal.aborted) throw signal.reason;
      unreachable++;
    }
    if (unreachable >= LOST_POLLS) return { error: 'stopped answering while it ran the prompt' };
    if (missing >= LOST_POLLS)
      return { error: 'lost the prompt: it is neither queued nor in its history (restarted?)' };
    if (entry?.status?.completed) return 'success';
    if (entry?.status?.status_str === 'error') {
      // An interrupted prompt is also `status_str: "error"`; its messages end with execution_interrupted.
      const messages = entry.status.messages ?? [];
      if (messages.some(([event]) => event === 'execution_interrupted')) return 'interrupted';
      return { error: describeFailure(messages.find(([event]) => event === 'execution_error')?.[1]) };
    }
  }
}

/** Whether the runner's queue holds the prompt, running or pending. */
async function queued(
  base: string,
  promptId: string,
  headers: RunnerHeaders,
  signal: AbortSignal,
): Promise<boolean> {
  const response = await request(`${base}/queue`, { headers, signal });
  const queue = (await response.body.json()) as { queue_running?: unknown[]; queue_pending?: unknown[] };
  return [...(queue.queue_running ?? []), ...(queue.queue_pending ?? [])].some(
    (item) => Array.isArray(item) && item[1] === promptId,
  );
}

async function fetchOutputs(
  base: string,
  promptId: string,
  outputNode: string,
  headers: RunnerHeaders,
  signal: AbortSignal,
): Promise<OutputFile[]> {
  // ComfyUI announces success a moment before it stores the history: look again briefly.
  let entry = await history(base, promptId, headers, signal);
  for (let i = 0; i < 20 && !entry?.outputs?.[outputNode]; i++) {
    await new Promise((r) => setTimeout(r, 100));
    entry = await history(base, promptId, headers, signal);
  }
  const node = entry?.outputs?.[outputNode];
  const refs = [...(node?.images ?? []), ...(node?.gifs ?? [])];
  if (refs.length === 0) throw new EngineError('the runner finished without an output file', 'broken', false);
  const files: OutputFile[] = [];
  for (const ref of refs) {
    const query = new URLSearchParams({
      filename: ref.filename,
      subfolder: ref.subfolder ?? '',
      type: ref.type ?? 'output',
    });
    const response = await request(`${base}/view?${query}`, { headers, signal });
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw new EngineError(
        `the runner could not serve ${ref.filename}: HTTP ${response.statusCode}`,
        'broken',
        false,
      );
    }
    const ext = ref.filename.split('.').pop()?.toLowerCase() ?? '';
    files.push({
      filename: ref.filename,
      data: Buffer.from(await response.body.arrayBuffer()),
      contentType:
        CONTENT_TYPES[ext] ?? String(response.headers['content-type'] ?? 'application/octet-stream'),
    });
  }
  return files;
}

/** Node classes that run a sampler pass, reporting `progress` step by step. */
const SAMPLERS = new Set(['KSampler', 'KSamplerAdvanced', 'SamplerCustom', 'SamplerCustomAdvanced']);

/**
 * The whole run's progress from one sampler's: a graph of several passes (Wan 2.2 samples twice)
 * reports each pass from 0 to its end, so pass k of n at `fraction` is (k + fraction) / n, the passes
 * numbered as they first report.
 */
function passProgress(
  graph: Record<string, { class_type?: unknown }>,
): (node: unknown, fraction: number) => number {
  const passes = Object.values(graph).filter((n) => SAMPLERS.has(String(n?.class_type))).length;
  const seen = new Map<unknown, number>();
  return (node, fraction) => {
    if (passes < 2) return fraction;
    let pass = seen.get(node);
    if (pass === undefined) {
      pass = Math.min(seen.size, passes - 1);
      seen.set(node, pass);
    }
    return (pass + fraction) / passes;
  };
}
