import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { shape } from '../helpers/shape.js';
import {
  httpOf,
  loadedImages,
  type RecordedRequest,
  type RecordedResponse,
  recording,
  signature,
  smallPng,
  type TimelineEntry,
  type WsMessage,
  wsOf,
} from './comfy-recordings.js';

/**
 * `kiln sim comfyui` held against a real ComfyUI 0.3.64 (../shared/reference/recordings/comfyui):
 * every recorded request is sent to the simulator as it was sent to ComfyUI, and the answers must
 * have the same status, content type and structure (ids, times and sizes aside), the `/ws` messages
 * the same sequence. The models directory of the recorded runner was empty, and so is the
 * simulator's here.
 */

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

async function send(sim: ComfySim, request: RecordedRequest): Promise<Answer> {
  const init: RequestInit = { method: request.method };
  if (request.body !== undefined) {
    init.body = JSON.stringify(request.body);
    init.headers = request.headers ?? { 'content-type': 'application/json' };
  }
  const res = await fetch(`${sim.url}${request.path}`, init);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** The simulator's answer against the recorded one: status, content type, Allow, body structure or text. */
function expectLike(answer: Answer, recorded: RecordedResponse, what: string) {
  expect(answer.status, what).toBe(recorded.status);
  expect(answer.headers.get('content-type'), what).toBe(recorded.headers['content-type']);
  if (recorded.headers.allow !== undefined)
    expect(answer.headers.get('allow'), what).toBe(recorded.headers.allow);
  if (recorded.body !== undefined) expect(shape(JSON.parse(answer.text)), what).toEqual(shape(recorded.body));
  else if (recorded.body_text !== undefined && !recorded.body_text.startsWith('<'))
    expect(answer.text, what).toBe(recorded.body_text);
}

async function upload(sim: ComfySim, name: string, data: Buffer) {
  const form = new FormData();
  form.append('image', new Blob([new Uint8Array(data)], { type: 'image/png' }), name);
  form.append('type', 'input');
  form.append('overwrite', 'false');
  const res = await fetch(`${sim.url}/upload/image`, { method: 'POST', body: form });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

interface Socket {
  messages: WsMessage[];
  until(match: (m: WsMessage) => boolean, timeoutMs?: number): Promise<void>;
  close(): void;
}

async function listen(sim: ComfySim, clientId: string): Promise<Socket> {
  const ws = new WebSocket(`${sim.url.replace('http', 'ws')}/ws?clientId=${clientId}`);
  const messages: WsMessage[] = [];
  const waiters = new Set<() => void>();
  ws.on('message', (raw, binary) => {
    if (binary) return;
    messages.push(JSON.parse(raw.toString()));
    for (const wake of waiters) wake();
  });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return {
    messages,
    until(match, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!messages.some(match)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no such message; got ${messages.map(signature).join(', ')}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () => ws.terminate(),
  };
}

const ended = (promptId: string) => (m: WsMessage) =>
  m.type === 'executing' && m.data.node === null && m.data.prompt_id === promptId;

/**
 * Replays a recorded timeline's HTTP calls in order on one socket of the recorded client id;
 * `before` may wait for a message first. Answers the socket's messages.
 */
async function replay(
  sim: ComfySim,
  file: { client_id: string; timeline: TimelineEntry[] },
  before: (request: RecordedRequest, socket: Socket) => Promise<void> = async () => undefined,
): Promise<{ messages: WsMessage[]; answers: Answer[] }> {
  const socket = await listen(sim, file.client_id);
  const answers: Answer[] = [];
  try {
    for (const { request, response } of httpOf(file.timeline)) {
      await before(request, socket);
      const answer = await send(sim, request);
      expectLike(answer, response, `${request.method} ${request.path}`);
      answers.push(answer);
    }
    // Messages a last request caused are sent a moment after its answer, as ComfyUI's are.
    await new Promise((r) => setTimeout(r, 200));
    return { messages: socket.messages, answers };
  } finally {
    socket.close();
  }
}

/** The recorded and simulated message sequences, line for line, and each message's structure. */
function expectSameRun(messages: WsMessage[], recorded: WsMessage[]) {
  expect(messages.map(signature)).toEqual(recorded.map(signature));
  messages.forEach((message, i) => {
    expect(shape(message.data), signature(message)).toEqual(shape(recorded[i]?.data));
  });
}

describe('the ComfyUI simulator answers as the recorded ComfyUI 0.3.64', () => {
  let sim: ComfySim;
  beforeAll(async () => {
    // ImageBlur takes 10 × 50 ms here, as a node that ignores interrupts until it ends.
    sim = await startComfySim({ models: [], stepMs: 50, steps: 10 });
  });
  afterAll(async () => sim?.close());

  it('GET /object_info/<class>: the 18 classes of Kiln’s templates, exactly as recorded on empty models and input directories', async () => {
    const recorded = recording('object-info-kiln-classes.json');
    expect(recorded.classes).toHaveLength(18);
    for (const name of recorded.classes as string[]) {
      const res = await fetch(`${sim.url}/object_info/${name}`);
      expect(res.status).toBe(recorded.responses[name].status);
      expect(await res.json(), name).toEqual(recorded.responses[name].body);
    }
  });

  it('GET /system_stats', async () => {
    const { request, response } = recording('system-stats.json');
    const answer = await send(sim, request);
    expectLike(answer, response, 'system_stats');
    expect(JSON.parse(answer.text).system.comfyui_version).toBe('0.3.64');
  });

  it('POST /upload/image: the same name and bytes keep the name, other bytes become "name (1).png"', async () => {
    const recorded = recording('upload-image.json');
    const name = recorded.first.response.body.name as string;
    const png = await smallPng();
    const answers = [
      await upload(sim, name, png),
      await upload(sim, name, png),
      await upload(sim, name, await smallPng([200, 10, 10])),
    ];
    const cases = [recorded.first, recorded.same_name_same_bytes_again, recorded.same_name_other_bytes];
    answers.forEach((answer, i) => {
      expectLike(answer, cases[i].response, `upload ${i + 1}`);
      expect(JSON.parse(answer.text)).toEqual(cases[i].response.body);
    });
  });

  it('POST /prompt of every template graph lacking its models: the same 400 bodies, tooltips included', async () => {
    const recorded = recording('prompt-400-missing-models.json') as Record<
      string,
      { uploads_before: { name: string }[]; request: RecordedRequest; response: RecordedResponse }
    >;
    expect(Object.keys(recorded)).toHaveLength(9);
    const png = await smallPng();
    for (const [graph, exchange] of Object.entries(recorded)) {
      for (const { name } of exchange.uploads_before) expect((await upload(sim, name, png)).status).toBe(200);
      const answer = await send(sim, exchange.request);
      expectLike(answer, exchange.response, graph);
      expect(JSON.parse(answer.text), graph).toEqual(exchange.response.body);
    }
  });

  it('a model-free run: the same /ws sequence (progress_state included), history and /view', async () => {
    const file = recording('run-success-ws.json');
    const prompt = httpOf(file.timeline)[0]?.request.body as { prompt: any };
    for (const image of loadedImages(prompt.prompt)) await upload(sim, image, await smallPng());
    const { messages, answers } = await replay(sim, file, async (request, socket) => {
      if (request.path.startsWith('/history/')) await socket.until(ended(file.prompt_id));
    });
    expectSameRun(messages, wsOf(file.timeline));
    // The file the recorded runner saved, under the same name, served as aiohttp serves a file:
    // its length, byte ranges, an ETag of its time and size, its modification time.
    const view = answers[2] as Answer;
    const recordedView = httpOf(file.timeline).find((e) => e.request.path.startsWith('/view'));
    const own = (headers: string[]) =>
      headers.filter((h) => !['date', 'connection', 'keep-alive', 'server'].includes(h)).sort();
    expect(own([...view.headers.keys()])).toEqual(own(Object.keys(recordedView?.response.headers ?? {})));
    expect(view.headers.get('content-disposition')).toBe('filename="rec_00001_.webm"');
    expect(view.headers.get('accept-ranges')).toBe('bytes');
    expect(view.headers.get('etag')).toMatch(/^"[0-9a-f]+-[0-9a-f]+"$/);
    expect(Number.isNaN(Date.parse(view.headers.get('last-modified') ?? ''))).toBe(false);
    const viewUrl = `${sim.url}${recordedView?.request.path}`;
    const whole = Buffer.from(await (await fetch(viewUrl)).arrayBuffer());
    expect(Number(view.headers.get('content-length'))).toBe(whole.length);
    const part = await fetch(viewUrl, { headers: { range: 'bytes=10-19' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 10-19/${whole.length}`);
    expect(Buffer.from(await part.arrayBuffer())).toEqual(whole.subarray(10, 20));
    const tail = await fetch(viewUrl, { headers: { range: 'bytes=-5' } });
    expect(Buffer.from(await tail.arrayBuffer())).toEqual(whole.subarray(whole.length - 5));
    const past = await fetch(viewUrl, { headers: { range: `bytes=${whole.length}-` } });
    expect([past.status, past.headers.get('content-range')]).toEqual([416, `bytes */${whole.length}`]);
    const history = JSON.parse(answers[1]?.text ?? '{}');
    expect(shape(history)).toEqual(shape(recording('history-bodies.json').success.body));
    expect(history[file.prompt_id].status).toMatchObject({ status_str: 'success', completed: true });
  });

  it('an execution error (a .png that does not decode): execution_error from LoadImage, then status and executing null', async () => {
    const file = recording('run-execution-error-ws.json');
    const prompt = httpOf(file.timeline)[0]?.request.body as { prompt: any };
    for (const image of loadedImages(prompt.prompt))
      await upload(sim, image, Buffer.from('this is not an image\n'));
    const { messages, answers } = await replay(sim, file, async (request, socket) => {
      if (request.path.startsWith('/history/')) await socket.until(ended(file.prompt_id));
    });
    expectSameRun(messages, wsOf(file.timeline));
    const error = messages.find((m) => m.type === 'execution_error')?.data;
    expect(error).toMatchObject({
      node_type: 'LoadImage',
      exception_type: 'PIL.UnidentifiedImageError',
      exception_message: expect.stringMatching(/^cannot identify image file '.*'\n$/),
      current_outputs: ['1', '9'],
    });
    const history = JSON.parse(answers[1]?.text ?? '{}');
    expect(shape(history)).toEqual(shape(recording('history-bodies.json').execution_error.body));
    expect(history[file.prompt_id]).toMatchObject({
      outputs: {},
      status: { status_str: 'error', completed: false },
      meta: {},
    });
  });

  it('an interrupt while node 11 runs takes effect when it ends: execution_interrupted at node 12', async () => {
    const file = recording('run-interrupted-ws.json');
    const prompt = httpOf(file.timeline)[0]?.request.body as { prompt: any };
    for (const image of loadedImages(prompt.prompt)) await upload(sim, image, await smallPng());
    const { messages, answers } = await replay(sim, file, async (request, socket) => {
      if (request.path === '/interrupt')
        await socket.until((m) => m.type === 'executing' && m.data.node === '11');
      if (request.path.startsWith('/history/')) await socket.until(ended(file.prompt_id));
    });
    expectSameRun(messages, wsOf(file.timeline));
    expect(messages.find((m) => m.type === 'execution_interrupted')?.data.executed.sort()).toEqual([
      '1',
      '10',
      '11',
      '2',
    ]);
    const history = JSON.parse(answers[2]?.text ?? '{}');
    expect(shape(history)).toEqual(shape(recording('history-bodies.json').interrupted.body));
    expect(history[file.prompt_id].status.messages.at(-1)[0]).toBe('execution_interrupted');
  });

  it('queue, interrupt and delete: a pending prompt ignores /interrupt, leaves with POST /queue {delete}; no /api/jobs', async () => {
    const file = recording('queue-interrupt-delete.json');
    const [a, b] = [file.running_prompt_A as string, file.pending_prompt_B as string];
    const first = httpOf(file.timeline).find((h) => h.request.path === '/prompt')?.request.body as {
      prompt: any;
    };
    for (const image of loadedImages(first.prompt)) await upload(sim, image, await smallPng());
    let interruptedA = false;
    const { messages } = await replay(sim, file, async (request, socket) => {
      if (request.path === '/interrupt' && (request.body as { prompt_id: string }).prompt_id === a)
        interruptedA = true;
      else if (interruptedA && request.path === '/queue' && request.method === 'GET') {
        await socket.until(ended(a));
        // Every status has gone out once A's run has ended.
      }
    });
    const recorded = wsOf(file.timeline);
    // Status messages interleave with the run by timing; each sequence on its own is the same.
    const statuses = (list: WsMessage[]) => list.filter((m) => m.type === 'status').map(signature);
    const run = (list: WsMessage[]) => list.filter((m) => m.type !== 'status');
    expect(statuses(messages)).toEqual(statuses(recorded));
    expectSameRun(run(messages), run(recorded));
    expect(await (await fetch(`${sim.url}/history/${b}`)).json()).toEqual({});
    expect(sim.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});
