import { setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * A job's progress covers the whole render. Wan 2.2 samples in two passes, each reporting its own
 * steps from the start: read as one, progress reached 0.99 at the end of the first pass and stood
 * there through the second.
 */
describe('progress of a render in two sampler passes', () => {
  let kiln: TestServer;
  let sim: ComfySim;

  beforeAll(async () => {
    sim = await startComfySim({ models: ['wan-2.2'], stepMs: 100, steps: 10 });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: { gpu: { url: sim.url, models: ['wan-2.2'] } },
      'jobs.poll_interval_ms': 50,
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await sim?.close();
  });

  it('moves on through the second pass, and reaches 0.99 only at its end', async () => {
    const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#123456' } })
      .png()
      .toBuffer();
    const image = `data:image/png;base64,${png.toString('base64')}`;
    const submitted = await kiln.call('POST', '/v1/videos/transitions', {
      body: { model: 'wan-2.2', start_image: image, end_image: image, duration_seconds: 1, size: '512x512' },
    });
    expect(submitted.status).toBe(202);
    const started = Date.now();
    const seen: number[] = [];
    let at99 = 0;
    let ended = 0;
    for (let i = 0; i < 500 && !ended; i++) {
      const { body } = await kiln.call('GET', submitted.body.polling_url);
      if (typeof body.progress === 'number' && body.progress !== seen.at(-1)) seen.push(body.progress);
      if (body.progress === 0.99 && !at99) at99 = Date.now() - started;
      if (!['queued', 'running'].includes(body.status)) {
        expect(body.status).toBe('completed');
        ended = Date.now() - started;
      } else await sleep(30);
    }
    expect(seen.at(-1)).toBe(1);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    // 0.99 comes at the end of the second pass, not halfway (then it stood for about 60 % of the run).
    expect(at99).toBeGreaterThan(0);
    expect((ended - at99) / ended).toBeLessThan(0.35);
  });
});
