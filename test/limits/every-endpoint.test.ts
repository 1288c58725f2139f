import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** Every request that creates work, in every mode: none may bypass a limit. */
const TOKEN_WORK: Array<[string, string, Record<string, unknown>]> = [
  [
    'chat sync',
    '/v1/chat/completions',
    { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 },
  ],
  [
    'chat stream',
    '/v1/chat/completions',
    { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, stream: true },
  ],
  [
    'chat async',
    '/v1/chat/completions',
    { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, mode: 'async' },
  ],
  ['responses sync', '/v1/responses', { model: 'm', input: 'hi', max_output_tokens: 8 }],
  ['responses stream', '/v1/responses', { model: 'm', input: 'hi', max_output_tokens: 8, stream: true }],
  [
    'responses background',
    '/v1/responses',
    { model: 'm', input: 'hi', max_output_tokens: 8, background: true },
  ],
];

let png = '';
const MEDIA_WORK = (): Array<[string, string, Record<string, unknown>]> => [
  ['images sync', '/v1/images/generations', { prompt: 'a kiln', size: '1024x1024' }],
  ['images async', '/v1/images/generations', { prompt: 'a kiln', size: '1024x1024', mode: 'async' }],
  ['videos async', '/v1/videos/generations', { prompt: 'a kiln', duration_seconds: 1 }],
  ['transitions async', '/v1/videos/transitions', { start_image: png, end_image: png, duration_seconds: 1 }],
];

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`limits on every endpoint: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let sims: LlmSim[];
    let comfy: ComfySim;

    beforeAll(async () => {
      png = `data:image/png;base64,${(
        await sharp({ create: { width: 64, height: 64, channels: 3, background: '#336' } })
          .png()
          .toBuffer()
      ).toString('base64')}`;
      sims = await simPool(1);
      comfy = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 1, steps: 2 });
      kiln = await startTestServer(storeCase, {
        engines: { quick: engine('unique', sims) },
        runners: { gpu: { url: comfy.url, models: ['ltx-video', 'sdxl'] } },
        'jobs.poll_interval_ms': 100,
      });
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await comfy?.close();
      await closeAll(sims ?? []);
    });

    /** A key of a new organisation with these limits, and what its organisation has run so far. */
    async function limited(limits: Record<string, number>) {
      const org = `org-${Math.random().toString(36).slice(2)}`;
      const created = await kiln.call('POST', '/admin/v1/orgs', { body: { name: org } });
      const key = await kiln.call('POST', '/admin/v1/keys', { body: { org, limits } });
      expect([created.status, key.status]).toEqual([201, 201]);
      const billed = async () => {
        const jobs = await kiln.call('GET', '/v1/jobs?limit=100', { key: key.body.key });
        const usage = await kiln.call('GET', '/api/v1/usage', { key: key.body.key });
        const ledger = usage.body.data.reduce((n: number, row: { jobs: number }) => n + row.jobs, 0);
        return { jobs: jobs.body.data.length, ledger, usage: usage.body };
      };
      return { key: key.body.key as string, billed };
    }

    const allEnded = (key: string) =>
      waitUntil(
        async () => {
          const jobs = await kiln.call('GET', '/v1/jobs?limit=100', { key });
          return jobs.body.data.every((j: { status: string }) => !['queued', 'running'].includes(j.status));
        },
        { timeoutMs: 30_000 },
      );

    it('a spent token budget refuses chat and responses in every mode with 429 budget-exceeded, and bills nothing', async () => {
      const { key, billed } = await limited({ tokens_per_day: 5 });
      // One request spends the budget (its prompt and answer are more than 5 tokens).
      const first = await kiln.call('POST', '/v1/chat/completions', { key, body: TOKEN_WORK[0]?.[2] });
      expect(first.status).toBe(200);
      await allEnded(key);
      const before = await billed();
      expect(before.usage.limits.key.tokens_per_day.used).toBe(
        first.body.usage.prompt_tokens + first.body.usage.completion_tokens,
      );
      for (const [name, route, body] of TOKEN_WORK) {
        const answer = await kiln.call('POST', route, { key, body });
        expect(answer.status, name).toBe(429);
        expect(answer.body.error.code, name).toBe('budget-exceeded');
        expect(answer.body.error.details[0], name).toMatchObject({ field: 'tokens_per_day', limit: 5 });
        expect(Number(answer.headers.get('retry-after')), name).toBeGreaterThan(0);
        expect(answer.headers.get('x-should-retry'), name).toBe('false');
      }
      const after = await billed();
      expect({ jobs: after.jobs, ledger: after.ledger }).toEqual({
        jobs: before.jobs,
        ledger: before.ledger,
      });
      expect(after.usage.limits.key.tokens_per_day.used).toBe(before.usage.limits.key.tokens_per_day.used);
    });

    it('a spent media budget refuses images, videos and transitions in every mode, and bills nothing', async () => {
      const { key, billed } = await limited({ media_seconds_per_day: 1 });
      const first = await kiln.call('POST', '/v1/images/generations', { key, body: MEDIA_WORK()[0]?.[2] });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      await allEnded(key);
      const before = await billed();
      expect(before.usage.limits.key.media_seconds_per_day.used).toBe(1);
      for (const [name, route, body] of MEDIA_WORK()) {
        const answer = await kiln.call('POST', route, { key, body });
        expect(answer.status, `${name}: ${JSON.stringify(answer.body)}`).toBe(429);
        expect(answer.body.error.code, name).toBe('budget-exceeded');
        expect(answer.body.error.details[0], name).toMatchObject({
          field: 'media_seconds_per_day',
          limit: 1,
        });
      }
      // A chat is not media: the media budget does not stop it.
      expect(
        (await kiln.call('POST', '/v1/chat/completions', { key, body: TOKEN_WORK[0]?.[2] })).status,
      ).toBe(200);
      await allEnded(key);
      const after = await billed();
      expect({ jobs: after.jobs, ledger: after.ledger }).toEqual({
        jobs: before.jobs + 1,
        ledger: before.ledger + 1,
      });
    });

    it('requests_per_minute counts and refuses every endpoint alike, with rate-limited and the OpenAI headers', async () => {
      const all = [...TOKEN_WORK, ...MEDIA_WORK()];
      const { key, billed } = await limited({ requests_per_minute: all.length });
      for (const [name, route, body] of all) {
        const answer = await kiln.call('POST', route, { key, body });
        expect(answer.status, `${name}: ${JSON.stringify(answer.body)}`).toBeLessThan(300);
        expect(answer.headers.get('x-ratelimit-limit-requests'), name).toBe(String(all.length));
      }
      await allEnded(key);
      const before = await billed();
      expect(before.jobs).toBe(all.length);
      for (const [name, route, body] of all) {
        const answer = await kiln.call('POST', route, { key, body });
        expect(answer.status, name).toBe(429);
        expect(answer.body.error.code, name).toBe('rate-limited');
        expect(answer.headers.get('x-ratelimit-remaining-requests'), name).toBe('0');
        expect(Number(answer.headers.get('retry-after')), name).toBeGreaterThan(0);
      }
      const after = await billed();
      expect({ jobs: after.jobs, ledger: after.ledger }).toEqual({
        jobs: before.jobs,
        ledger: before.ledger,
      });
      const metrics = await kiln.call('GET', '/metrics');
      expect(metrics.body).toMatch(
        /kiln_limit_rejections_total\{limit="requests_per_minute",scope="key"\} [1-9]/,
      );
    });
  });
}
