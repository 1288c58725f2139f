import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Figures a limit counts that are no whole number of a sensible size: a request asking for 1e19
 * tokens, a fractional `limits.image_seconds` (3 images × 0.1 s = 300.00000000000006 ms). Both
 * stores admit or refuse them alike, counting whole units; PostgreSQL used to answer 500 (its
 * BIGINT columns refuse both) where SQLite admitted.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`limits counting odd figures: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let sims: LlmSim[];
    let comfy: ComfySim;

    beforeAll(async () => {
      sims = await simPool(1);
      comfy = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2 });
      kiln = await startTestServer(storeCase, {
        engines: { quick: engine('unique', sims) },
        runners: { gpu: { url: comfy.url, models: ['sdxl'] } },
        'jobs.poll_interval_ms': 100,
        'limits.image_seconds': 0.1,
      });
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await comfy?.close();
      await closeAll(sims ?? []);
    });

    const limited = async (limits: Record<string, number>) => {
      const org = `org-${Math.random().toString(36).slice(2)}`;
      await kiln.call('POST', '/admin/v1/orgs', { body: { name: org } });
      return (await kiln.call('POST', '/admin/v1/keys', { body: { org, limits } })).body.key as string;
    };
    it('1e19 tokens asked for: admitted while the budget has room, as on either store', async () => {
      for (const [path, body] of [
        [
          '/v1/chat/completions',
          { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1e19, mode: 'async' },
        ],
        ['/v1/responses', { model: 'm', input: 'hi', max_output_tokens: 1e19, background: true }],
      ] as const) {
        const key = await limited({ tokens_per_day: 1_000_000 });
        const answer = await kiln.call('POST', path, { key, body });
        expect([path, answer.status]).toEqual([path, path === '/v1/responses' ? 200 : 202]);
      }
    });

    it('three images at 0.1 s each (300 ms of media) are admitted, as on either store', async () => {
      const key = await limited({ media_seconds_per_day: 100 });
      for (const n of [1, 3]) {
        const answer = await kiln.call('POST', '/v1/images/generations', {
          key,
          body: { prompt: 'a kiln', size: '1024x1024', n },
        });
        expect(answer.status).toBe(200);
        expect(answer.body.data).toHaveLength(n);
      }
      const usage = await kiln.call('GET', '/api/v1/usage', { key });
      expect(usage.body.data).toMatchObject([{ kind: 'image.generation', jobs: 2, output_units: 4 }]);
    });
  });
}
