import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * A runner that restarts mid-render has lost the prompt; one that goes away answers nothing. Either
 * way the job fails within seconds, saying so — not at the runner's timeout (30 minutes by default,
 * 60 s here), as `engine-timeout`, blamed on slowness.
 */
describe('a runner that loses the prompt it runs', () => {
  let kiln: TestServer | undefined;
  let sim: ComfySim | undefined;
  afterEach(async () => {
    await kiln?.close();
    await sim?.close();
  });

  it.each([
    ['restarts', true, /lost the prompt: it is neither queued nor in its history/],
    ['goes away', false, /stopped answering while it ran the prompt/],
  ])('%s: the job fails within seconds, naming why', async (_how, restart, why) => {
    sim = await startComfySim({ models: ['ltx-video'], stepMs: 500, steps: 40 });
    const { port } = sim;
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: { gpu: { url: sim.url, models: ['ltx-video'], timeout: '60s' } },
      'jobs.poll_interval_ms': 50,
    });
    const submitted = await kiln.call('POST', '/v1/videos/generations', {
      body: { prompt: 'waves', duration_seconds: 1, size: '512x512' },
    });
    expect(submitted.status).toBe(202);
    for (let i = 0; i < 100 && sim.stats().running === 0; i++) await sleep(50);
    expect(sim.stats().running).toBe(1);
    await sim.close();
    const lostAt = Date.now();
    sim = restart ? await startComfySim({ models: ['ltx-video'], stepMs: 500, steps: 40, port }) : undefined;
    let body: Record<string, unknown> = {};
    while (Date.now() - lostAt < 30_000) {
      body = (await kiln.call('GET', submitted.body.polling_url)).body;
      if (!['queued', 'running'].includes(String(body.status))) break;
      await sleep(200);
    }
    expect(body).toMatchObject({
      status: 'failed',
      code: 'inference-failed',
      message: expect.stringMatching(why),
    });
    expect(Date.now() - lostAt).toBeLessThan(20_000);
  });
});
