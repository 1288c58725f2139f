import { createHmac } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runFfprobe } from '../../src/media/ffmpeg.js';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { closedPort } from '../helpers/ports.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

async function dataUri(width: number, height: number, color: string): Promise<string> {
  const png = await sharp({ create: { width, height, channels: 3, background: color } })
    .png()
    .toBuffer();
  return `data:image/png;base64,${png.toString('base64')}`;
}

async function settle(kiln: TestServer, path: string, timeoutMs = 60_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  const seen: number[] = [];
  for (;;) {
    const { body } = await kiln.call('GET', path);
    if (typeof body.progress === 'number') seen.push(body.progress);
    if (['completed', 'failed', 'cancelled', 'timeout'].includes(body.status)) return { ...body, seen };
    if (Date.now() > deadline) throw new Error(`job ${path} still ${body.status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The whole path on a machine without a GPU: Kiln → ComfyUI protocol → a real rendered video. */
describe('video and images through a ComfyUI runner', () => {
  let kiln: TestServer;
  let sim: ComfySim;
  let start: string;
  let end: string;
  const hooks: Array<{ headers: Record<string, string | string[] | undefined>; body: string }> = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      hooks.push({ headers: req.headers, body });
      res.end('ok');
    });
  });

  beforeAll(async () => {
    sim = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 5, steps: 10 });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: { gpu: { url: sim.url, models: ['ltx-video', 'sdxl'] } },
      'security.allow_hosts': ['127.0.0.1'],
      'jobs.poll_interval_ms': 100,
    });
    start = await dataUri(1280, 720, '#1d3557');
    end = await dataUri(1280, 720, '#e63946');
  }, 60_000);
  afterAll(async () => {
    await kiln?.close();
    await sim?.close();
    receiver.close();
  });

  it('a transition of two 1280x720 PNGs renders a 1280x704 video whose measured length is the one reported', async () => {
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const accepted = await kiln.call('POST', '/v1/videos/transitions', {
      body: {
        start_image: start,
        end_image: end,
        size: '1280x720',
        duration_seconds: 2,
        prompt: 'slow push in',
        webhook: { url: hook, secret: 'transition-secret' },
      },
    });
    expect(accepted.status).toBe(202);
    expect(accepted.body).toMatchObject({
      object: 'video.transition',
      model: 'ltx-video',
      size: '1280x704',
      size_adjusted: true,
    });

    const done = await settle(kiln, accepted.body.polling_url);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(done.seen.some((p: number) => p > 0 && p < 1)).toBe(true);
    const { result } = done;
    expect(result).toMatchObject({ width: 1280, height: 704, content_type: 'video/webm' });

    // The signed URL downloads without a key.
    const download = await fetch(result.url);
    expect(download.status).toBe(200);
    expect(download.headers.get('content-type')).toBe('video/webm');
    const bytes = Buffer.from(await download.arrayBuffer());
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'kiln-video-')), 'clip.webm');
    writeFileSync(file, bytes);
    const probe = JSON.parse(
      await runFfprobe(['-v', 'error', '-show_streams', '-show_format', '-of', 'json', file]),
    );
    const stream = probe.streams.find((s: { codec_type: string }) => s.codec_type === 'video');
    expect([stream.width, stream.height]).toEqual([1280, 704]);
    const measuredMs = Math.round(Number(probe.format.duration) * 1000);
    expect(Math.abs(measuredMs - result.duration_ms)).toBeLessThanOrEqual(50);
    // LTX-Video's frame rule: 8n+1 frames at 24 fps, nearest to the 2 s asked for.
    expect(Math.abs(result.duration_ms - 2000)).toBeLessThanOrEqual(1000 / 24 + 1);

    // A range request, as a browser seeking in the video makes.
    const ranged = await fetch(result.url, { headers: { range: 'bytes=0-99' } });
    expect(ranged.status).toBe(206);
    expect((await ranged.arrayBuffer()).byteLength).toBe(100);

    // The webhook got the completed body, signed.
    for (let i = 0; i < 100 && hooks.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(hooks).toHaveLength(1);
    const [hookCall] = hooks;
    const { status, result: hookResult } = JSON.parse(hookCall?.body ?? '{}');
    expect(status).toBe('completed');
    expect(hookResult.duration_ms).toBe(result.duration_ms);
    const [, t, v1] = /t=(\d+),v1=([0-9a-f]+)/.exec(String(hookCall?.headers['x-service-signature'])) ?? [];
    expect(v1).toBe(createHmac('sha256', 'transition-secret').update(`${t}.${hookCall?.body}`).digest('hex'));
  }, 90_000);

  it('an image that cannot be fetched fails the job invalid-image-url, naming its field, on one line', async () => {
    const refused = await kiln.call('POST', '/v1/videos/transitions', {
      body: {
        start_image: start,
        end_image: `https://127.0.0.1:${await closedPort()}/b.png`,
        size: '512x512',
      },
    });
    expect(refused.status).toBe(202);
    // The caller's URL gave no image: its own code, naming the field, not the runner's failure.
    expect(await settle(kiln, `/v1/jobs/${refused.body.id}`)).toMatchObject({
      status: 'failed',
      code: 'invalid-image-url',
      message: 'end_image could not be fetched: ECONNREFUSED',
      param: 'end_image',
    });
    // TLS spoken to a plain-HTTP server: the TLS library's words, its first line, after the field.
    const plain = `https://127.0.0.1:${(receiver.address() as AddressInfo).port}/a.png`;
    const wrong = await kiln.call('POST', '/v1/videos/transitions', {
      body: { start_image: plain, size: '512x512' },
    });
    const failed = await settle(kiln, `/v1/jobs/${wrong.body.id}`);
    expect(failed).toMatchObject({ status: 'failed', code: 'invalid-image-url', param: 'start_image' });
    expect(failed.message).toMatch(/^start_image could not be fetched: \S/);
    expect(failed.message).not.toContain('\n');
    // Waited on (`Prefer: wait`): the failed job, with its id, as a poll answers it.
    const waited = await kiln.call('POST', '/v1/videos/transitions', {
      body: { start_image: plain, size: '512x512' },
      headers: { prefer: 'wait=20' },
    });
    expect(waited.status, JSON.stringify(waited.body)).toBe(200);
    expect(waited.body).toMatchObject({
      id: expect.stringMatching(/^vidgen-/),
      status: 'failed',
      code: 'invalid-image-url',
      param: 'start_image',
    });
  }, 60_000);

  it('wan-2.2 against a runner lacking it fails workflow-model-missing with the runner’s own words', async () => {
    const accepted = await kiln.call('POST', '/v1/videos/transitions', {
      body: { start_image: start, model: 'wan-2.2', size: '512x512', duration_seconds: 1 },
    });
    expect(accepted.body.model).toBe('wan-2.2');
    const done = await settle(kiln, `/v1/jobs/${accepted.body.id}`);
    expect(done).toMatchObject({ status: 'failed', code: 'workflow-model-missing', model: 'wan-2.2' });
    // Every file the runner lacks, each in its own words, node by node.
    expect(done.upstreamError).toBe(
      [
        "UNETLoader (node 1): Value not in list: unet_name: 'wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors' not in []",
        "UNETLoader (node 2): Value not in list: unet_name: 'wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors' not in []",
        "CLIPLoader (node 3): Value not in list: clip_name: 'umt5_xxl_fp8_e4m3fn_scaled.safetensors' not in ['t5xxl_fp16.safetensors']",
        "VAELoader (node 4): Value not in list: vae_name: 'wan_2.1_vae.safetensors' not in ['pixel_space']",
      ].join('; '),
    );
    expect(done.message).toBe(
      `the runner does not have 4 model files this workflow needs: ${done.upstreamError}`,
    );
    const models = await kiln.call('GET', '/v1/models');
    expect(models.body.data.find((m: { id: string }) => m.id === 'wan-2.2')).toMatchObject({
      kind: 'video',
      ready: false,
    });
    expect(models.body.data.find((m: { id: string }) => m.id === 'ltx-video')).toMatchObject({
      kind: 'video',
      ready: true,
    });
  }, 60_000);

  it('images: sync with URLs, async, and b64_json inline', async () => {
    const sync = await kiln.call('POST', '/v1/images/generations', {
      body: { prompt: 'a kiln at dusk', n: 2, size: '512x512' },
    });
    expect(sync.status, JSON.stringify(sync.body)).toBe(200);
    expect(sync.body.data).toHaveLength(2);
    for (const { url } of sync.body.data) {
      const image = Buffer.from(await (await fetch(url)).arrayBuffer());
      expect(await sharp(image).metadata()).toMatchObject({ format: 'png', width: 512, height: 512 });
    }
    const inline = await kiln.call('POST', '/v1/images/generations', {
      body: { prompt: 'a kiln', response_format: 'b64_json', size: '512x512' },
    });
    const decoded = Buffer.from(inline.body.data[0].b64_json, 'base64');
    expect((await sharp(decoded).metadata()).width).toBe(512);
    const queued = await kiln.call('POST', '/v1/images/generations', {
      body: { prompt: 'later', mode: 'async', size: '512x512' },
    });
    expect(queued.status).toBe(202);
    expect(queued.body).toMatchObject({
      object: 'image.generation.async',
      id: expect.stringMatching(/^imggen-/),
    });
    const done = await settle(kiln, queued.body.polling_url);
    expect(done.result.data[0].url).toMatch(
      /\/v1\/files\/file_[0-9a-f]{32}\/content\?expires=\d+&signature=/,
    );
  }, 60_000);

  it('a video generation is async only, and runs', async () => {
    const sync = await kiln.call('POST', '/v1/videos/generations', {
      body: { prompt: 'waves', mode: 'sync' },
    });
    expect(sync.status).toBe(400);
    expect(sync.body.error.details[0].field).toBe('mode');
    const accepted = await kiln.call('POST', '/v1/videos/generations', {
      body: { prompt: 'waves', image: start, size: '512x512', duration_seconds: 1 },
    });
    expect(accepted.status).toBe(202);
    expect(accepted.body.object).toBe('video.generation');
    const done = await settle(kiln, accepted.body.polling_url);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(done.result).toMatchObject({ width: 512, height: 512 });
  }, 60_000);
});
