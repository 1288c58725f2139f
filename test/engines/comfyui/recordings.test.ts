import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type WebSocket, WebSocketServer } from 'ws';
import { ModelMissingError, runWorkflow } from '../../../src/engines/comfyui/adapter.js';
import { missingModels, promptRefusal } from '../../../src/engines/comfyui/refusal.js';
import type { Workflow } from '../../../src/engines/comfyui/workflows.js';
import { EngineError } from '../../../src/engines/types.js';
import {
  httpOf,
  type RecordedResponse,
  recording,
  type TimelineEntry,
  type WsMessage,
} from '../../sim/comfy-recordings.js';

/**
 * The ComfyUI adapter against the exact answers of a real ComfyUI 0.3.64
 * (../shared/reference/recordings/comfyui): a local server plays a recorded run — its HTTP answers
 * and its `/ws` messages in order — with the recorded ids swapped for the ones the adapter chose.
 */

interface Script {
  /** Recorded ids, replaced in every answer by the adapter's. */
  clientId: string;
  promptId: string;
  prompt: RecordedResponse;
  /** Messages sent on connect, then after the POST /prompt answer. */
  onConnect: WsMessage[];
  afterPrompt: WsMessage[];
  history?: RecordedResponse;
  view?: RecordedResponse;
  /** GET /queue's answer while the run is on (ids already the adapter's). */
  queue?: (promptId: string) => unknown;
  /** Holds the POST /prompt answer back this long. */
  promptDelayMs?: number;
}

let script: Script;
let server: Server;
let wss: WebSocketServer;
let url: string;
/** What the adapter asked, in order. */
let requests: { method: string; path: string; body: string }[] = [];
let ids = { clientId: '', promptId: '' };
let socket: WebSocket | undefined;

const swap = (text: string) =>
  text.replaceAll(script.promptId, ids.promptId).replaceAll(script.clientId, ids.clientId);

const upload = recording('upload-image.json').first.response as RecordedResponse;
const emptyOk: RecordedResponse = {
  status: 200,
  headers: { 'content-type': 'application/octet-stream' },
  body_text: '',
};

function answer(res: import('node:http').ServerResponse, recorded: RecordedResponse) {
  const headers = { ...recorded.headers };
  delete headers['content-length'];
  let bytes: Buffer;
  const size = /^<(\d+) bytes of .*>$/.exec(recorded.body_text ?? '');
  if (size) bytes = Buffer.alloc(Number(size[1]), 7);
  else if (recorded.body !== undefined) bytes = Buffer.from(swap(JSON.stringify(recorded.body)));
  else bytes = Buffer.from(recorded.body_text ?? '');
  res.writeHead(recorded.status, headers);
  res.end(bytes);
}

async function readBody(req: IncomingMessage): Promise<string> {
  let text = '';
  for await (const chunk of req) text += chunk.toString('latin1');
  return text;
}

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const body = await readBody(req);
    const path = req.url ?? '/';
    requests.push({ method: req.method ?? 'GET', path, body: req.method === 'POST' ? body : '' });
    if (path === '/upload/image') return answer(res, upload);
    if (path === '/prompt') {
      const sent = JSON.parse(body) as { prompt_id: string; client_id: string };
      ids = { promptId: sent.prompt_id, clientId: sent.client_id };
      if (script.promptDelayMs) await new Promise((r) => setTimeout(r, script.promptDelayMs));
      answer(res, script.prompt);
      for (const message of script.afterPrompt) {
        await new Promise((r) => setTimeout(r, 2));
        socket?.send(swap(JSON.stringify(message)));
      }
      return;
    }
    if (path.startsWith('/history/') && script.history) return answer(res, script.history);
    if (path.startsWith('/view?') && script.view) return answer(res, script.view);
    if (path === '/queue' && req.method === 'GET' && script.queue) {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
      return res.end(JSON.stringify(script.queue(ids.promptId)));
    }
    if ((path === '/queue' || path === '/interrupt') && req.method === 'POST') return answer(res, emptyOk);
    // What 0.3.64's static route answers anything else.
    if (req.method === 'GET') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
      return res.end('404: Not Found');
    }
    res.writeHead(405, { 'content-type': 'text/plain; charset=utf-8', allow: 'GET,HEAD' });
    res.end('405: Method Not Allowed');
  });
  wss = new WebSocketServer({ server, path: '/ws' });
  wss.on('connection', (ws, req) => {
    socket = ws;
    ids.clientId = new URL(req.url ?? '/', 'http://x').searchParams.get('clientId') ?? '';
    for (const message of script.onConnect) ws.send(swap(JSON.stringify(message)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(() => {
  requests = [];
  socket = undefined;
});
afterAll(async () => {
  wss.close();
  await new Promise((resolve) => server.close(resolve));
});

/** A recorded run as a script: messages before the POST /prompt on connect, the rest after it. */
function scriptOf(file: { client_id: string; prompt_id: string; timeline: TimelineEntry[] }): Script {
  const at = file.timeline.findIndex((entry) => 'http' in entry);
  const ws = (entries: TimelineEntry[]) => entries.flatMap((entry) => ('ws' in entry ? [entry.ws] : []));
  const http = httpOf(file.timeline);
  return {
    clientId: file.client_id,
    promptId: file.prompt_id,
    prompt: http[0]?.response as RecordedResponse,
    onConnect: ws(file.timeline.slice(0, at)),
    afterPrompt: ws(file.timeline.slice(at + 1)),
    ...(http.find((h) => h.request.path.startsWith('/history/'))
      ? { history: http.find((h) => h.request.path.startsWith('/history/'))?.response as RecordedResponse }
      : {}),
    ...(http.find((h) => h.request.path.startsWith('/view'))
      ? { view: http.find((h) => h.request.path.startsWith('/view'))?.response as RecordedResponse }
      : {}),
  };
}

const runner = () => ({ name: 'rec', url, timeoutMs: 60_000 });

/** Runs the recorded graph, its LoadImage filled with the name the runner gave the upload. */
function run(file: { timeline: TimelineEntry[] }, signal = new AbortController().signal) {
  const recorded = httpOf(file.timeline)[0]?.request.body as { prompt: Workflow };
  const filled: { names: Record<string, string> } = { names: {} };
  const promise = runWorkflow(runner(), {
    fill: (uploaded) => {
      filled.names = uploaded;
      const graph = structuredClone(recorded.prompt);
      for (const node of Object.values(graph))
        if (node.class_type === 'LoadImage') node.inputs.image = uploaded.start_image;
      return graph;
    },
    images: [{ param: 'start_image', data: Buffer.from('png'), contentType: 'image/png' }],
    outputNode: Object.keys(recorded.prompt).at(-1) as string,
    signal,
  });
  return { promise, filled };
}

describe('the adapter replaying a real ComfyUI 0.3.64', () => {
  it('a successful run: follows the recorded /ws sequence, reads the history and downloads the file', async () => {
    const file = recording('run-success-ws.json');
    script = scriptOf(file);
    const { promise, filled } = run(file);
    const files = await promise;
    expect(filled.names).toEqual({ start_image: (upload.body as { name: string }).name });
    expect(files).toHaveLength(1);
    expect(files[0]?.filename).toBe('rec_00001_.webm');
    expect(files[0]?.contentType).toBe('video/webm');
    expect(files[0]?.data.length).toBe(1315);
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /upload/image',
      'POST /prompt',
      `GET /history/${ids.promptId}`,
      'GET /view?filename=rec_00001_.webm&subfolder=kiln&type=output',
    ]);
    const submitted = JSON.parse(requests[1]?.body ?? '{}');
    expect(submitted.client_id).toBe(ids.clientId);
    expect(submitted.prompt_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  });

  it('an execution_error ends the run with the node, the exception type and its message', async () => {
    const file = recording('run-execution-error-ws.json');
    script = scriptOf(file);
    const error = await run(file).promise.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).kind).toBe('broken');
    expect((error as Error).message).toBe(
      "runner rec: LoadImage failed: PIL.UnidentifiedImageError cannot identify image file '<path>/base/input/kiln-68a15cf7-8d7c-46f6-9d44-8fa08f60f572.png'",
    );
    expect(requests.some((r) => r.path.startsWith('/view'))).toBe(false);
  });

  it('an interrupt Kiln did not ask for ends the run as interrupted', async () => {
    const file = recording('run-interrupted-ws.json');
    script = scriptOf(file);
    const error = await run(file).promise.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect((error as Error).message).toBe('runner rec interrupted the prompt');
  });

  it('with a quiet socket, the history backstop tells an interrupted prompt from a failed one', async () => {
    const file = recording('run-interrupted-ws.json');
    script = { ...scriptOf(file), afterPrompt: [] };
    const error = await run(file).promise.catch((e: unknown) => e);
    expect((error as Error).message).toBe('runner rec interrupted the prompt');
    const failed = recording('run-execution-error-ws.json');
    script = { ...scriptOf(failed), afterPrompt: [] };
    const failure = await run(failed).promise.catch((e: unknown) => e);
    expect((failure as Error).message).toMatch(/^runner rec: LoadImage failed: PIL\.UnidentifiedImageError /);
  }, 15_000);
});

describe('workflow-model-missing from the recorded 400s', () => {
  const cases = recording('prompt-400-missing-models.json') as Record<
    string,
    { request: { body: { prompt: Workflow } }; response: RecordedResponse }
  >;

  it('names every missing file of the Wan 2.2 graph, in the runner’s own words, node by node', async () => {
    const wan = cases['wan-2.2/start_and_end'] as (typeof cases)[string];
    script = {
      clientId: 'none',
      promptId: 'none',
      prompt: wan.response,
      onConnect: [],
      afterPrompt: [],
    };
    const error = await runWorkflow(runner(), {
      fill: () => wan.request.body.prompt,
      images: [],
      outputNode: '14',
      signal: new AbortController().signal,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelMissingError);
    expect((error as ModelMissingError).upstream).toBe(
      [
        "UNETLoader (node 1): Value not in list: unet_name: 'wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors' not in []",
        "UNETLoader (node 2): Value not in list: unet_name: 'wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors' not in []",
        "CLIPLoader (node 3): Value not in list: clip_name: 'umt5_xxl_fp8_e4m3fn_scaled.safetensors' not in []",
        "VAELoader (node 4): Value not in list: vae_name: 'wan_2.1_vae.safetensors' not in ['pixel_space']",
      ].join('; '),
    );
    expect((error as Error).message).toBe(
      `the runner does not have 4 model files this workflow needs: ${(error as ModelMissingError).upstream}`,
    );
  });

  it('counts the files of every recorded template graph: wan-2.2 4, ltx 2, sdxl 1', () => {
    const counts = Object.fromEntries(
      Object.entries(cases).map(([graph, exchange]) => [
        graph,
        missingModels(exchange.response.body as never).map((m) => `${m.node}:${m.input}`),
      ]),
    );
    expect(counts).toEqual({
      'ltx-2.3/start_and_end': ['1:ckpt_name', '2:clip_name'],
      'ltx-2.3/start_only': ['1:ckpt_name', '2:clip_name'],
      'ltx-2.3/text_only': ['1:ckpt_name', '2:clip_name'],
      'ltx-video/start_and_end': ['1:ckpt_name', '2:clip_name'],
      'ltx-video/start_only': ['1:ckpt_name', '2:clip_name'],
      'ltx-video/text_only': ['1:ckpt_name', '2:clip_name'],
      'sdxl/text_to_image': ['1:ckpt_name'],
      'wan-2.2/start_and_end': ['1:unet_name', '2:unet_name', '3:clip_name', '4:vae_name'],
      'wan-2.2/start_only': ['1:unet_name', '2:unet_name', '3:clip_name', '4:vae_name'],
    });
    const sdxl = promptRefusal(cases['sdxl/text_to_image']?.response.body as never) as ModelMissingError;
    expect(sdxl.message).toBe(
      "the runner does not have a model file this workflow needs: CheckpointLoaderSimple (node 1): Value not in list: ckpt_name: 'sd_xl_base_1.0.safetensors' not in []",
    );
  });

  it('a loader input that is not its model file (CLIPLoader type) is a plain refusal', () => {
    const refusal = promptRefusal({
      error: { type: 'prompt_outputs_failed_validation', message: 'Prompt outputs failed validation' },
      node_errors: {
        '2': {
          class_type: 'CLIPLoader',
          errors: [
            {
              type: 'value_not_in_list',
              message: 'Value not in list',
              details: "type: 'flux9' not in (list of length 16)",
              extra_info: { input_name: 'type' },
            },
          ],
        },
      },
    });
    expect(refusal).toBeInstanceOf(EngineError);
    expect(refusal.message).toBe(
      "the runner refused the workflow: Prompt outputs failed validation (Value not in list: type: 'flux9' not in (list of length 16))",
    );
  });
});

describe('a cancelled run is taken back from the runner', () => {
  const file = recording('queue-interrupt-delete.json');
  const queues = httpOf(file.timeline)
    .filter((h) => h.request.method === 'GET' && h.request.path === '/queue')
    .map((h) => h.response.body as { queue_running: unknown[][]; queue_pending: unknown[][] });
  // The recorded /queue with A running and B pending, B (or A) becoming the adapter's prompt.
  const withOurs = (as: 'running' | 'pending') => (promptId: string) =>
    JSON.parse(
      JSON.stringify(queues[1]).replaceAll(
        as === 'pending' ? file.pending_prompt_B : file.running_prompt_A,
        promptId,
      ),
    );
  const quietRun = recording('run-success-ws.json');

  const abortWhenSubmitted = async (promise: Promise<unknown>, controller: AbortController) => {
    for (let i = 0; i < 200 && !requests.some((r) => r.path === '/prompt'); i++)
      await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 30));
    controller.abort(new Error('cancelled by the test'));
    return promise.catch((e: unknown) => e);
  };
  const afterSubmission = () =>
    requests
      .slice(requests.findIndex((r) => r.path === '/prompt') + 1)
      .map((r) => `${r.method} ${r.path}${r.body ? ` ${r.body}` : ''}`);

  it('pending: POST /queue {"delete": [id]}, and no /interrupt (ComfyUI would ignore it) nor /api/jobs', async () => {
    expect(queues[1]?.queue_pending.map((item) => item[1])).toEqual([file.pending_prompt_B]);
    script = { ...scriptOf(quietRun), afterPrompt: [], queue: withOurs('pending') };
    const controller = new AbortController();
    const error = await abortWhenSubmitted(run(quietRun, controller.signal).promise, controller);
    expect((error as Error).message).toBe('cancelled by the test');
    expect(afterSubmission()).toEqual([`POST /queue {"delete":["${ids.promptId}"]}`, 'GET /queue']);
  });

  it('running: the delete does nothing, so POST /interrupt {"prompt_id": id}', async () => {
    script = { ...scriptOf(quietRun), afterPrompt: [], queue: withOurs('running') };
    const controller = new AbortController();
    const error = await abortWhenSubmitted(run(quietRun, controller.signal).promise, controller);
    expect((error as Error).message).toBe('cancelled by the test');
    expect(afterSubmission()).toEqual([
      `POST /queue {"delete":["${ids.promptId}"]}`,
      'GET /queue',
      `POST /interrupt {"prompt_id":"${ids.promptId}"}`,
    ]);
  });

  it('an abort while POST /prompt is in flight withdraws the prompt once the runner has answered', async () => {
    script = { ...scriptOf(quietRun), afterPrompt: [], queue: withOurs('pending'), promptDelayMs: 300 };
    const controller = new AbortController();
    const promise = run(quietRun, controller.signal).promise;
    for (let i = 0; i < 200 && !requests.some((r) => r.path === '/prompt'); i++)
      await new Promise((r) => setTimeout(r, 5));
    const abortedAt = Date.now();
    controller.abort(new Error('cancelled by the test'));
    const error = await promise.catch((e: unknown) => e);
    expect((error as Error).message).toBe('cancelled by the test');
    // The run ended only after the runner answered the prompt and was told to drop it.
    expect(Date.now() - abortedAt).toBeGreaterThanOrEqual(250);
    expect(afterSubmission()).toEqual([`POST /queue {"delete":["${ids.promptId}"]}`, 'GET /queue']);
  });
});
