import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import WebSocket from 'ws';
import { EngineError } from '../types.js';
import type { Workflow } from './workflows.js';

/** A ComfyUI server as Kiln drives it. */
export interface RunnerTarget {
  readonly name: string;
  readonly url: string;
  readonly timeoutMs: number;
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

/**
 * The runner refused the workflow because a model file it names is not installed
 * (`value_not_in_list` on a loader node). `upstream` is the runner's own message.
 */
export class ModelMissingError extends Error {
  constructor(readonly upstream: string) {
    super(`the runner does not have a model file this workflow needs: ${upstream}`);
    this.name = 'ModelMissingError';
  }
}

const LOADERS = new Set([
  'CheckpointLoaderSimple',
  'UNETLoader',
  'CLIPLoader',
  'VAELoader',
  'LoraLoader',
  'CLIPVisionLoader',
]);

interface NodeError {
  type: string;
  message: string;
  details?: string;
}

/** ComfyUI's 400 for a prompt, as an engine error — or a model-missing error when a loader lacks its file. */
function promptRefusal(body: {
  error?: { type?: string; message?: string; details?: string };
  node_errors?: Record<string, { class_type?: string; errors?: NodeError[] }>;
}): Error {
  for (const node of Object.values(body.node_errors ?? {})) {
    for (const error of node.errors ?? []) {
      if (error.type === 'value_not_in_list' && LOADERS.has(node.class_type ?? '')) {
        return new ModelMissingError(`${error.message}: ${error.details ?? ''}`.trim());
      }
    }
  }
  const first = Object.values(body.node_errors ?? {})[0]?.errors?.[0];
  const why = first ? `${first.message}: ${first.details ?? ''}` : (body.error?.details ?? '');
  return new EngineError(
    `the runner refused the workflow: ${body.error?.message ?? 'invalid prompt'} (${why})`,
    'rejected',
    true,
    400,
  );
}

/** A connection failure to the runner, before it ran anything. */
const unreachable = (runner: RunnerTarget) => (error: unknown) => {
  throw new EngineError(
    `cannot reach runner ${runner.name}: ${(error as Error).message}`,
    'unavailable',
    true,
  );
};

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
 * output files with `GET /view`. An abort interrupts the prompt on the runner.
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
  },
): Promise<OutputFile[]> {
  const base = runner.url.replace(/\/+$/, '');
  const clientId = randomUUID();
  const promptId = randomUUID();

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
      body: form,
      signal: call.signal,
    }).catch(unreachable(runner));
    if (!response.ok)
      throw new EngineError(
        `runner ${runner.name} refused an input image: HTTP ${response.status}`,
        'broken',
        true,
      );
    const { name, subfolder } = (await response.json()) as { name: string; subfolder?: string };
    uploaded[image.param] = subfolder ? `${subfolder}/${name}` : name;
  }

  const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/ws?clientId=${clientId}`);
  const finished = new Promise<'success' | { error: string } | 'interrupted'>((resolve) => {
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
        const { value, max } = message.data as { value: number; max: number };
        if (max > 0) call.onProgress?.(value / max);
      } else if (message.type === 'execution_success') resolve('success');
      else if (message.type === 'execution_error') {
        const data = message.data as {
          exception_type?: string;
          exception_message?: string;
          node_type?: string;
        };
        resolve({
          error:
            `${data.node_type ?? 'a node'} failed: ${data.exception_type ?? ''} ${data.exception_message ?? ''}`.trim(),
        });
      } else if (message.type === 'execution_interrupted') resolve('interrupted');
    });
  });
  await new Promise<void>((resolve) => {
    socket.once('open', () => resolve());
    // Without the socket the history poll still finds the result.
    socket.once('error', () => resolve());
  });

  try {
    const submitted = await request(`${base}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: call.fill(uploaded), client_id: clientId, prompt_id: promptId }),
      signal: call.signal,
    }).catch(unreachable(runner));
    const answer = (await submitted.body.json()) as Parameters<typeof promptRefusal>[0];
    if (submitted.statusCode >= 400) throw promptRefusal(answer);

    const abort = () => {
      void request(`${base}/interrupt`, {
        method: 'POST',
        body: JSON.stringify({ prompt_id: promptId }),
        headers: { 'content-type': 'application/json' },
      })
        .then((r) => r.body.dump())
        .catch(() => undefined);
      void request(`${base}/api/jobs/${promptId}/cancel`, { method: 'POST' })
        .then((r) => r.body.dump())
        .catch(() => undefined);
    };
    call.signal.addEventListener('abort', abort, { once: true });
    try {
      const outcome = await Promise.race([finished, historyDone(base, promptId, call.signal)]);
      if (call.signal.aborted) throw call.signal.reason;
      if (outcome === 'interrupted')
        throw new EngineError(`runner ${runner.name} interrupted the prompt`, 'broken', false);
      if (typeof outcome === 'object')
        throw new EngineError(`runner ${runner.name}: ${outcome.error}`, 'broken', false);
    } finally {
      call.signal.removeEventListener('abort', abort);
    }
    return await fetchOutputs(base, promptId, call.outputNode, call.signal);
  } finally {
    socket.terminate();
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
  signal: AbortSignal,
): Promise<HistoryEntry | undefined> {
  const response = await request(`${base}/history/${promptId}`, { signal });
  const body = (await response.body.json()) as Record<string, HistoryEntry>;
  return body[promptId];
}

/** The backstop: a prompt whose socket went quiet is done once its history says so. */
async function historyDone(
  base: string,
  promptId: string,
  signal: AbortSignal,
): Promise<'success' | { error: string }> {
  for (;;) {
    await new Promise((r) => setTimeout(r, 2000));
    if (signal.aborted) throw signal.reason;
    const entry = await history(base, promptId, signal).catch(() => undefined);
    if (entry?.status?.completed) return 'success';
    if (entry?.status?.status_str === 'error') {
      const error = entry.status.messages?.find(([event]) => event === 'execution_error')?.[1];
      return { error: String(error?.exception_message ?? 'the prompt failed') };
    }
  }
}

async function fetchOutputs(
  base: string,
  promptId: string,
  outputNode: string,
  signal: AbortSignal,
): Promise<OutputFile[]> {
  // ComfyUI announces success a moment before it stores the history: look again briefly.
  let entry = await history(base, promptId, signal);
  for (let i = 0; i < 20 && !entry?.outputs?.[outputNode]; i++) {
    await new Promise((r) => setTimeout(r, 100));
    entry = await history(base, promptId, signal);
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
    const response = await request(`${base}/view?${query}`, { signal });
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
