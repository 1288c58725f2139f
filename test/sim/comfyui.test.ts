import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { fill, loadTemplates, type Workflow } from '../../src/engines/comfyui/workflows.js';
import { probeVideo, runFfmpeg } from '../../src/media/ffmpeg.js';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { killAll, spawnKiln } from '../helpers/process.js';

const templates = loadTemplates();
const graph = (model: string, name: string) => templates.get(model)?.graphs[name] as Workflow;

/** A solid-colour PNG, as a client would upload it. */
const png = (width: number, height: number, rgb: [number, number, number]) =>
  sharp({ create: { width, height, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } })
    .png()
    .toBuffer();

async function upload(sim: ComfySim, name: string, data: Buffer, extra: Record<string, string> = {}) {
  const form = new FormData();
  form.append('image', new Blob([new Uint8Array(data)], { type: 'image/png' }), name);
  form.append('type', 'input');
  for (const [key, value] of Object.entries(extra)) form.append(key, value);
  const res = await fetch(`${sim.url}/upload/image`, { method: 'POST', body: form });
  expect(res.status).toBe(200);
  return (await res.json()) as { name: string; subfolder: string; type: string };
}

async function post(sim: ComfySim, path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

const getJson = async (sim: ComfySim, path: string) =>
  (await fetch(`${sim.url}${path}`)).json() as Promise<any>;

interface Socket {
  messages: { type: string; data: any }[];
  /** Resolves with the first message (past or future) `match` accepts. */
  next(
    match: (m: { type: string; data: any }) => boolean,
    timeoutMs?: number,
  ): Promise<{ type: string; data: any }>;
  close(): void;
}

async function listen(sim: ComfySim, clientId: string): Promise<Socket> {
  const ws = new WebSocket(`${sim.url.replace('http', 'ws')}/ws?clientId=${clientId}`);
  const messages: Socket['messages'] = [];
  const waiters = new Set<() => void>();
  ws.on('message', (raw, binary) => {
    if (binary) return;
    messages.push(JSON.parse(raw.toString()));
    for (const wake of waiters) wake();
  });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return {
    messages,
    next(match, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = messages.find(match);
          if (!found) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(found);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no such message; got ${messages.map((m) => m.type).join(', ')}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () => ws.terminate(),
  };
}

const finished = (promptId: string) => (m: { type: string; data: any }) =>
  m.type === 'executing' && m.data.node === null && m.data.prompt_id === promptId;

/** The mean colour of one decoded frame. */
async function frameColour(file: string, frame: number): Promise<number[]> {
  const out = `${file}.${frame}.png`;
  await runFfmpeg(['-y', '-i', file, '-vf', `select=eq(n\\,${frame})`, '-frames:v', '1', out]);
  const { channels } = await sharp(out).stats();
  return channels.slice(0, 3).map((c) => Math.round(c.mean));
}

const sdxl = (params: { prompt: string; seed: number; n: number; width?: number; height?: number }) =>
  fill(graph('sdxl', 'text_to_image'), {
    negative_prompt: '',
    width: 256,
    height: 192,
    ...params,
  });

describe('kiln sim comfyui', () => {
  let sim: ComfySim;
  let scratch: string;
  let start: string;
  let end: string;

  beforeAll(async () => {
    sim = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 20, steps: 10 });
    scratch = await mkdtemp(join(tmpdir(), 'comfy-sim-test-'));
    start = (await upload(sim, 'start.png', await png(640, 360, [220, 30, 30]))).name;
    end = (await upload(sim, 'end.png', await png(640, 360, [30, 30, 220]))).name;
  });
  afterAll(async () => {
    await sim?.close();
    await rm(scratch, { recursive: true, force: true });
  });

  it('keeps uploads by name: a clash becomes "name (1).ext", the same content keeps its name', async () => {
    expect([start, end]).toEqual(['start.png', 'end.png']);
    const green = await png(64, 64, [0, 200, 0]);
    expect(await upload(sim, 'start.png', green)).toEqual({
      name: 'start (1).png',
      subfolder: '',
      type: 'input',
    });
    expect((await upload(sim, 'start.png', green)).name).toBe('start (1).png');
    expect((await upload(sim, 'start.png', await png(640, 360, [220, 30, 30]))).name).toBe('start.png');
    expect(await upload(sim, 'in-folder.png', green, { subfolder: 'kiln' })).toEqual({
      name: 'in-folder.png',
      subfolder: 'kiln',
      type: 'input',
    });
  });

  it('runs the LTX-Video start-and-end graph: /ws progress, history, and a real VP9 WebM of the asked size', async () => {
    const clientId = randomUUID();
    const promptId = randomUUID();
    const socket = await listen(sim, clientId);
    const prompt = fill(graph('ltx-video', 'start_and_end'), {
      prompt: 'a slow dolly shot from a red room into a blue one',
      negative_prompt: 'blurry',
      start_image: start,
      end_image: end,
      width: 512,
      height: 288,
      length: 25,
      fps: 24,
      seed: 7,
    });
    const submitted = await post(sim, '/prompt', { prompt, client_id: clientId, prompt_id: promptId });
    expect(submitted).toEqual({
      status: 200,
      body: { prompt_id: promptId, number: expect.any(Number), node_errors: {} },
    });
    await socket.next(finished(promptId));
    socket.close();

    const run = socket.messages.filter((m) => m.type !== 'status');
    expect(socket.messages[0]).toEqual({
      type: 'status',
      data: { status: { exec_info: { queue_remaining: expect.any(Number) } }, sid: clientId },
    });
    expect(run[0]).toEqual({
      type: 'execution_start',
      data: { prompt_id: promptId, timestamp: expect.any(Number) },
    });
    expect(run[1]).toEqual({
      type: 'execution_cached',
      data: { nodes: [], prompt_id: promptId, timestamp: expect.any(Number) },
    });
    const executing = run.filter((m) => m.type === 'executing').map((m) => m.data.node);
    expect(new Set(executing)).toEqual(new Set([...Object.keys(prompt), null]));
    expect(executing.indexOf('10')).toBeGreaterThan(executing.indexOf('9'));
    expect(executing.indexOf('14')).toBeGreaterThan(executing.indexOf('12'));
    const progress = run.filter((m) => m.type === 'progress').map((m) => m.data);
    expect(progress).toEqual(
      Array.from({ length: 10 }, (_, i) => ({ value: i + 1, max: 10, prompt_id: promptId, node: '10' })),
    );
    const executed = run.find((m) => m.type === 'executed');
    expect(executed?.data).toEqual({
      node: '14',
      display_node: '14',
      prompt_id: promptId,
      output: {
        images: [
          { filename: expect.stringMatching(/^ltx-video_\d{5}_\.webm$/), subfolder: 'kiln', type: 'output' },
        ],
        animated: [true],
      },
    });
    expect(run.slice(-2).map((m) => m.type)).toEqual(['execution_success', 'executing']);

    const history = await getJson(sim, `/history/${promptId}`);
    const entry = history[promptId];
    expect(entry.prompt.slice(0, 2)).toEqual([submitted.body.number, promptId]);
    expect(entry.prompt[2]['14'].inputs.fps).toBe(24);
    // ComfyUI 0.3.64 keeps extra_data as sent (newer builds add create_time for /api/jobs).
    expect(entry.prompt[3]).toEqual({ client_id: clientId });
    expect(entry.prompt[4]).toEqual(['14']);
    expect(entry.outputs).toEqual({ '14': executed?.data.output });
    expect(entry.status.status_str).toBe('success');
    expect(entry.status.completed).toBe(true);
    expect(entry.status.messages.map(([event]: [string]) => event)).toEqual([
      'execution_start',
      'execution_cached',
      'execution_success',
    ]);
    expect(Object.keys((await getJson(sim, '/history')) as object)).toContain(promptId);

    const file = entry.outputs['14'].images[0];
    const view = await fetch(
      `${sim.url}/view?${new URLSearchParams({ filename: file.filename, subfolder: file.subfolder, type: 'output' })}`,
    );
    expect(view.status).toBe(200);
    expect(view.headers.get('content-type')).toBe('video/webm');
    const local = join(scratch, file.filename);
    await writeFile(local, Buffer.from(await view.arrayBuffer()));
    const probe = await probeVideo(local, { countFrames: true });
    expect(probe).toMatchObject({
      codec: 'vp9',
      width: 512,
      height: 288,
      frames: 25,
      pixelFormat: 'yuv420p',
    });
    expect(probe.fps).toBe(24);
    expect(probe.durationSeconds).toBeCloseTo(25 / 24, 1);
    // The clip starts on the start image (red) and ends on the end image (blue).
    const [first, last] = [await frameColour(local, 0), await frameColour(local, 24)];
    expect(first[0]).toBeGreaterThan(180);
    expect(first[2]).toBeLessThan(70);
    expect(last[2]).toBeGreaterThan(180);
    expect(last[0]).toBeLessThan(70);
  });

  it('refuses the Wan graph on a runner without wan-2.2 with ComfyUI value_not_in_list errors', async () => {
    expect(await getJson(sim, '/models/checkpoints')).toEqual([
      'ltx-video-2b-v0.9.5.safetensors',
      'sd_xl_base_1.0.safetensors',
    ]);
    expect(await getJson(sim, '/models/diffusion_models')).toEqual([]);
    const info = await getJson(sim, '/object_info');
    expect(info.CheckpointLoaderSimple.input.required.ckpt_name).toEqual([
      ['ltx-video-2b-v0.9.5.safetensors', 'sd_xl_base_1.0.safetensors'],
      { tooltip: 'The name of the checkpoint (model) to load.' },
    ]);
    expect(info.VAELoader.input.required.vae_name).toEqual([['pixel_space']]);
    expect(info.LoadImage.input.required.image[0]).toContain(start);

    const prompt = fill(graph('wan-2.2', 'start_and_end'), {
      prompt: 'p',
      negative_prompt: '',
      start_image: start,
      end_image: end,
      width: 512,
      height: 288,
      length: 33,
      fps: 16,
      seed: 1,
    });
    const answer = await post(sim, '/prompt', { prompt, client_id: randomUUID() });
    expect(answer.status).toBe(400);
    expect(answer.body.error).toEqual({
      type: 'prompt_outputs_failed_validation',
      message: 'Prompt outputs failed validation',
      details: '',
      extra_info: {},
    });
    const high = 'wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors';
    expect(answer.body.node_errors['1']).toEqual({
      errors: [
        {
          type: 'value_not_in_list',
          message: 'Value not in list',
          details: `unet_name: '${high}' not in []`,
          extra_info: { input_name: 'unet_name', input_config: [[], {}], received_value: high },
        },
      ],
      dependent_outputs: ['14'],
      class_type: 'UNETLoader',
    });
    expect(answer.body.node_errors['3'].errors[0].details).toBe(
      "clip_name: 'umt5_xxl_fp8_e4m3fn_scaled.safetensors' not in ['t5xxl_fp16.safetensors']",
    );
    expect(Object.keys(answer.body.node_errors).sort()).toEqual(['1', '2', '3', '4']);
    expect(sim.stats().prompts).toBeGreaterThanOrEqual(1);
  });

  it('answers the other validation failures as ComfyUI does', async () => {
    const ltx = (startImage: string) =>
      fill(graph('ltx-video', 'start_only'), {
        prompt: 'p',
        negative_prompt: '',
        start_image: startImage,
        width: 512,
        height: 288,
        length: 9,
        fps: 24,
        seed: 1,
      });
    const missingImage = await post(sim, '/prompt', { prompt: ltx('never-uploaded.png') });
    expect(missingImage.status).toBe(400);
    expect(missingImage.body.node_errors['5']).toEqual({
      errors: [
        {
          type: 'custom_validation_failed',
          message: 'Custom validation failed for node',
          details: 'image - Invalid image file: never-uploaded.png',
          extra_info: { input_name: 'image' },
        },
      ],
      dependent_outputs: ['14'],
      class_type: 'LoadImage',
    });
    // A file in an upload subfolder is named with its folder.
    expect((await post(sim, '/prompt', { prompt: ltx('kiln/in-folder.png') })).status).toBe(200);

    const custom = { ...ltx(start), '20': { class_type: 'SomeCustomNode', inputs: {} } };
    expect(await post(sim, '/prompt', { prompt: custom })).toEqual({
      status: 400,
      body: {
        error: {
          type: 'missing_node_type',
          message: "Node 'SomeCustomNode' not found. The custom node may not be installed.",
          details: "Node ID '#20'",
          extra_info: { node_id: '20', class_type: 'SomeCustomNode', node_title: 'SomeCustomNode' },
        },
        node_errors: {},
      },
    });
    const { '14': _save, ...headless } = ltx(start);
    expect((await post(sim, '/prompt', { prompt: headless })).body.error).toEqual({
      type: 'prompt_no_outputs',
      message: 'Prompt has no outputs',
      details: '',
      extra_info: {},
    });
    const badId = await post(sim, '/prompt', { prompt: ltx(start), prompt_id: 'ABC' });
    expect(badId.status).toBe(400);
    expect(badId.body.error.type).toBe('invalid_prompt_id');
    const tooShort = ltx(start);
    (tooShort['7'] as { inputs: Record<string, unknown> }).inputs.length = 5;
    const range = await post(sim, '/prompt', { prompt: tooShort });
    expect(range.body.node_errors['7'].errors[0]).toMatchObject({
      type: 'value_smaller_than_min',
      message: 'Value 5 smaller than min of 9',
      details: 'length',
    });
  });

  it('saves n PNGs of the asked size for the SDXL graph, the same for the same prompt and seed', async () => {
    const clientId = randomUUID();
    const socket = await listen(sim, clientId);
    const run = async (seed: number) => {
      const { body } = await post(sim, '/prompt', {
        prompt: sdxl({ prompt: 'a lighthouse at dusk', seed, n: 2 }),
        client_id: clientId,
      });
      await socket.next(finished(body.prompt_id));
      const entry = (await getJson(sim, `/history/${body.prompt_id}`))[body.prompt_id];
      expect(entry.status.status_str).toBe('success');
      const images = entry.outputs['9'].images as { filename: string; subfolder: string; type: string }[];
      return Promise.all(
        images.map(async (image) => {
          expect(image).toMatchObject({
            filename: expect.stringMatching(/^sdxl_\d{5}_\.png$/),
            subfolder: 'kiln',
          });
          const res = await fetch(`${sim.url}/api/view?${new URLSearchParams({ ...image })}`);
          expect(res.headers.get('content-type')).toBe('image/png');
          return Buffer.from(await res.arrayBuffer());
        }),
      );
    };
    const first = await run(42);
    expect(first).toHaveLength(2);
    for (const image of first) {
      expect(await sharp(image).metadata()).toMatchObject({ width: 256, height: 192, format: 'png' });
    }
    expect(first[0]?.equals(first[1] as Buffer)).toBe(false);
    const again = await run(42);
    expect(again[0]?.equals(first[0] as Buffer)).toBe(true);
    const other = await run(43);
    socket.close();
    expect(other[0]?.equals(first[0] as Buffer)).toBe(false);
  });

  it('serves /view only inside its folders', async () => {
    const status = async (query: Record<string, string>) =>
      (await fetch(`${sim.url}/view?${new URLSearchParams(query)}`)).status;
    expect(await status({ filename: '../../etc/passwd', type: 'output' })).toBe(400);
    expect(await status({ filename: '/etc/passwd' })).toBe(400);
    expect(await status({ filename: 'passwd', subfolder: '../../../etc', type: 'output' })).toBe(403);
    expect(await status({ filename: 'nothing.webm', type: 'output' })).toBe(404);
    expect(await status({ filename: start, type: 'input' })).toBe(200);
  });
});

describe('kiln sim comfyui faults', () => {
  let sim: ComfySim;
  beforeAll(async () => {
    sim = await startComfySim({ models: ['sdxl'], stepMs: 40, steps: 10 });
  });
  afterAll(async () => sim?.close());

  it('interrupts a running prompt and cancels a queued one', async () => {
    const clientId = randomUUID();
    const socket = await listen(sim, clientId);
    const submit = async (seed: number) =>
      (await post(sim, '/prompt', { prompt: sdxl({ prompt: 'p', seed, n: 1 }), client_id: clientId })).body
        .prompt_id as string;
    const running = await submit(1);
    const queued = await submit(2);
    await socket.next((m) => m.type === 'progress' && m.data.prompt_id === running);
    expect(sim.stats()).toMatchObject({ running: 1, queued: 1 });
    const queue = await getJson(sim, '/api/queue');
    expect(queue.queue_running.map((item: unknown[]) => item[1])).toEqual([running]);
    expect(queue.queue_pending.map((item: unknown[]) => item[1])).toEqual([queued]);

    // ComfyUI ignores /interrupt naming a prompt that is not running: it stays queued.
    expect(await post(sim, '/interrupt', { prompt_id: queued })).toEqual({ status: 200, body: undefined });
    expect((await getJson(sim, '/queue')).queue_pending.map((item: unknown[]) => item[1])).toEqual([queued]);
    expect(await post(sim, '/queue', { delete: [queued] })).toEqual({ status: 200, body: undefined });
    expect((await getJson(sim, '/queue')).queue_pending).toEqual([]);
    expect(await post(sim, '/queue', { delete: [randomUUID()] })).toEqual({ status: 200, body: undefined });
    expect(await post(sim, '/interrupt', { prompt_id: randomUUID() })).toEqual({
      status: 200,
      body: undefined,
    });
    expect(await post(sim, '/interrupt', { prompt_id: running })).toEqual({ status: 200, body: undefined });

    const interrupted = await socket.next((m) => m.type === 'execution_interrupted');
    expect(interrupted.data).toEqual({
      prompt_id: running,
      node_id: '5',
      node_type: 'KSampler',
      executed: expect.arrayContaining(['1', '2', '3', '4']),
      timestamp: expect.any(Number),
    });
    await socket.next(finished(running));
    socket.close();
    const entry = (await getJson(sim, `/history/${running}`))[running];
    expect(entry.status).toMatchObject({ status_str: 'error', completed: false });
    expect(entry.status.messages.at(-1)[0]).toBe('execution_interrupted');
    expect(entry.outputs).toEqual({});
    expect(await getJson(sim, `/history/${queued}`)).toEqual({});
    expect(sim.stats()).toMatchObject({ running: 0, queued: 0, interrupted: 1 });
  });

  it('fails a prompt containing [sim:fail] with an execution_error', async () => {
    const clientId = randomUUID();
    const socket = await listen(sim, clientId);
    const { body } = await post(sim, '/prompt', {
      prompt: sdxl({ prompt: 'a cat [sim:fail]', seed: 3, n: 1 }),
      client_id: clientId,
    });
    const failure = await socket.next((m) => m.type === 'execution_error');
    await socket.next(finished(body.prompt_id));
    socket.close();
    expect(failure.data).toEqual({
      prompt_id: body.prompt_id,
      node_id: '5',
      node_type: 'KSampler',
      executed: expect.arrayContaining(['1', '4']),
      exception_message: expect.stringContaining('[sim:fail]'),
      exception_type: 'RuntimeError',
      traceback: [expect.any(String)],
      current_inputs: expect.objectContaining({ seed: [3], steps: [25] }),
      current_outputs: ['1', '2', '3', '4', '5', '6', '9'],
      timestamp: expect.any(Number),
    });
    expect(socket.messages.filter((m) => m.type === 'progress').length).toBeGreaterThan(0);
    expect(socket.messages.some((m) => m.type === 'execution_success')).toBe(false);
    const entry = (await getJson(sim, `/history/${body.prompt_id}`))[body.prompt_id];
    expect(entry.status).toMatchObject({ status_str: 'error', completed: false });
    expect(entry.status.messages.at(-1)).toEqual(['execution_error', failure.data]);
  });
  it('reports a failing encode (H.264 at an odd width) as an execution_error on the save node', async () => {
    const clientId = randomUUID();
    const socket = await listen(sim, clientId);
    const prompt = {
      '1': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'sd_xl_base_1.0.safetensors' } },
      '2': {
        class_type: 'EmptyHunyuanLatentVideo',
        inputs: { width: 65, height: 64, length: 9, batch_size: 1 },
      },
      '3': { class_type: 'VAEDecode', inputs: { samples: ['2', 0], vae: ['1', 2] } },
      '4': { class_type: 'CreateVideo', inputs: { images: ['3', 0], fps: 24 } },
      '5': {
        class_type: 'SaveVideo',
        inputs: { video: ['4', 0], filename_prefix: 'kiln/odd', format: 'mp4', codec: 'h264' },
      },
    };
    const { body } = await post(sim, '/prompt', { prompt, client_id: clientId });
    const failure = await socket.next((m) => m.type === 'execution_error');
    socket.close();
    expect(failure.data).toMatchObject({
      prompt_id: body.prompt_id,
      node_id: '5',
      node_type: 'SaveVideo',
      executed: expect.arrayContaining(['1', '2', '3', '4']),
      exception_message: expect.stringMatching(/ffmpeg exited with code \d+: .*width not divisible by 2/),
    });
  });
});

describe('kiln sim comfyui with newer builds\u2019 /api/jobs (jobsApi)', () => {
  let sim: ComfySim;
  beforeAll(async () => {
    sim = await startComfySim({ models: ['sdxl'], stepMs: 40, steps: 10, jobsApi: true });
  });
  afterAll(async () => sim?.close());

  it('cancels a queued prompt, interrupts a running one and shows each job', async () => {
    const clientId = randomUUID();
    const socket = await listen(sim, clientId);
    const submit = async (seed: number) =>
      (await post(sim, '/prompt', { prompt: sdxl({ prompt: 'p', seed, n: 1 }), client_id: clientId })).body
        .prompt_id as string;
    const running = await submit(1);
    const queued = await submit(2);
    await socket.next((m) => m.type === 'progress' && m.data.prompt_id === running);
    expect((await getJson(sim, `/api/jobs/${queued}`)).status).toBe('pending');
    expect(await post(sim, `/api/jobs/${queued}/cancel`, {})).toEqual({
      status: 200,
      body: { cancelled: true },
    });
    expect(await post(sim, `/api/jobs/${running}/cancel`, {})).toEqual({
      status: 200,
      body: { cancelled: true },
    });
    await socket.next(finished(running));
    socket.close();
    const job = await getJson(sim, `/api/jobs/${running}`);
    expect(job).toMatchObject({ id: running, status: 'cancelled', create_time: expect.any(Number) });
    expect(await getJson(sim, `/history/${queued}`)).toEqual({});
    expect(await post(sim, `/api/jobs/${running}/cancel`, {})).toEqual({
      status: 200,
      body: { cancelled: false },
    });
    // Only under /api, as newer ComfyUI mounts it.
    expect((await fetch(`${sim.url}/jobs/${running}`)).status).toBe(404);
  });
});

describe('kiln sim comfyui (command)', () => {
  afterEach(async () => killAll());

  it('prints its URL, serves the chosen models, and exits 0 on SIGTERM', async () => {
    const child = spawnKiln(
      {},
      ['sim', 'comfyui', '--port', '0', '--models', 'ltx-video'],
      'test/sim/sim-cli.ts',
    );
    const line = await child.waitForLine((l) => typeof l.text === 'string');
    const url = String(line.text);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await (await fetch(`${url}/models/checkpoints`)).json()).toEqual([
      'ltx-video-2b-v0.9.5.safetensors',
    ]);
    child.child.kill('SIGTERM');
    expect(await child.exited).toEqual({ code: 0, signal: null });
  });

  it('refuses an unknown model with a message and a non-zero exit', async () => {
    const child = spawnKiln({}, ['sim', 'comfyui', '--port', '0', '--models', 'nope'], 'test/sim/sim-cli.ts');
    expect((await child.exited).code).not.toBe(0);
    expect(child.output()).toMatch(/unknown model nope/);
  });
});
