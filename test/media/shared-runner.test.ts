import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * A ComfyUI runner runs one prompt at a time and queues the rest. Two Kiln processes that share it
 * (two workers, or two deployments) each count only their own prompts against its
 * `max_concurrency`; Kiln also reads the runner's own queue, so a job waits for room in Kiln, where
 * the runner's `timeout` does not run, instead of in ComfyUI's queue, where it would.
 */
describe.each(storeCases)('a runner shared by two Kiln processes ($name)', (storeCase) => {
  const kilns: TestServer[] = [];
  let sim: ComfySim | undefined;
  afterEach(async () => {
    await Promise.all(kilns.splice(0).map((kiln) => kiln.close()));
    await sim?.close();
  });

  const settled = async (kiln: TestServer, polling: string) => {
    for (let i = 0; i < 200; i++) {
      const { body } = await kiln.call('GET', polling);
      if (!['queued', 'running'].includes(body.status)) return body;
      await sleep(100);
    }
    throw new Error(`${polling} never ended`);
  };

  it.skipIf(storeCase.skip)(
    'max_concurrency 1: the second job waits for the first, off the clock, and both complete',
    async () => {
      // A prompt takes about 1.5 s on the runner; the timeout allows 2.5 s, not a wait and a run.
      sim = await startComfySim({ models: ['ltx-video'], stepMs: 150, steps: 10 });
      const runners = {
        gpu: { url: sim.url, models: ['ltx-video'], max_concurrency: 1, timeout: '2500ms' },
      };
      for (let i = 0; i < 2; i++)
        kilns.push(await startTestServer(storeCase, { runners, 'jobs.poll_interval_ms': 50 }));
      const jobs = await Promise.all(
        kilns.map(async (kiln) => {
          const submitted = await kiln.call('POST', '/v1/videos/generations', {
            body: { prompt: 'waves', duration_seconds: 1, size: '512x512' },
          });
          expect(submitted.status).toBe(202);
          return { kiln, polling: submitted.body.polling_url as string };
        }),
      );
      // While both run, the runner holds one prompt at a time: none waits in its queue. (Looked at
      // from half a second in: two checks at the same moment may put a second prompt there, which
      // is taken back at once.)
      let most = 0;
      const watching = (async () => {
        await sleep(500);
        for (let i = 0; i < 40; i++) {
          const { running, queued } = (sim as ComfySim).stats();
          most = Math.max(most, running + queued);
          await sleep(50);
        }
      })();
      const outcomes = await Promise.all(jobs.map(({ kiln, polling }) => settled(kiln, polling)));
      await watching;
      expect(outcomes.map((job) => `${job.status} ${job.code ?? ''}`.trim())).toEqual([
        'completed',
        'completed',
      ]);
      expect(most).toBe(1);
    },
    30_000,
  );
});
