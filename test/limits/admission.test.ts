import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiKey } from '../../src/store/index.js';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** A key of a new organisation with these limits, and its record. */
async function limitedKey(kiln: TestServer, org: string, limits: ApiKey['limits']) {
  const key = await kiln.key(org);
  const [record] = await kiln.server.store.keys.list((await kiln.server.store.orgs.byName(org))?.id);
  await kiln.server.store.keys.update(record?.id as string, { limits });
  return { key, id: record?.id as string };
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`rate limits and budgets: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    const kind = sleepKind();

    beforeAll(async () => {
      kiln = await startTestServer(storeCase, {}, { kinds: [kind as never], routes: sleepRoutes(kind) });
    });
    afterAll(async () => {
      await kiln?.close();
    });

    const sleep = (key: string, body: Record<string, unknown>) =>
      kiln.call('POST', '/v1/test/sleep', { key, body });

    it('admissions younger than the request (another gateway, a clock slightly ahead) never put Retry-After past a minute', async () => {
      const { key, id } = await limitedKey(kiln, 'rpm-ahead-org', { requests_per_minute: 2 });
      const [record] = await kiln.server.store.keys.list(
        (await kiln.server.store.orgs.byName('rpm-ahead-org'))?.id,
      );
      for (const n of [1, 2])
        await kiln.server.store.admissions.insert({
          job_id: `ahead-${n}`,
          key_id: id,
          org_id: record?.org_id as string,
          created_at: Date.now() + 1500,
          tokens: 0,
          media_ms: 0,
          held: 0,
        });
      const refused = await sleep(key, { ms: 1, mode: 'sync' });
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeLessThanOrEqual(60);
      expect(Number(refused.headers.get('retry-after-ms'))).toBeLessThanOrEqual(60_000);
      expect(Number(refused.headers.get('retry-after-ms'))).toBeGreaterThan(58_000);
    });

    it('requests_per_minute admits that many, then answers 429 rate-limited with Retry-After and OpenAI headers', async () => {
      const { key } = await limitedKey(kiln, 'rpm-org', { requests_per_minute: 3 });
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push(await sleep(key, { ms: 1, mode: 'sync' }));
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
      expect(answers.map((a) => a.headers.get('x-ratelimit-remaining-requests'))).toEqual(['2', '1', '0']);
      expect(answers[0]?.headers.get('x-ratelimit-limit-requests')).toBe('3');
      expect(answers[0]?.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d+m)?\d+(\.\d+)?m?s$/);

      const refused = await sleep(key, { ms: 1, mode: 'sync' });
      expect(refused.status).toBe(429);
      expect(refused.body.error).toMatchObject({ code: 'rate-limited', type: 'rate_limit_error' });
      expect(refused.body.error.details[0]).toMatchObject({
        field: 'requests_per_minute',
        scope: 'key',
        limit: 3,
        used: 3,
      });
      const retry = Number(refused.headers.get('retry-after'));
      expect(retry).toBeGreaterThanOrEqual(55);
      expect(retry).toBeLessThanOrEqual(60);
      expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      const jobs = await kiln.call('GET', '/v1/jobs?limit=100', { key });
      expect(jobs.body.data).toHaveLength(3);
      // Answers that create no work carry the headers too, as the window stands.
      expect(jobs.headers.get('x-ratelimit-limit-requests')).toBe('3');
      expect(jobs.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      // MCP, whose transport writes its own head, and the files API, outside the main scope.
      const mcp = await kiln.call('POST', '/mcp', {
        key,
        headers: { accept: 'application/json, text/event-stream' },
        body: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      });
      expect(mcp.status).toBe(200);
      expect(mcp.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      const file = await kiln.call('GET', '/v1/files/file_00000000000000000000000000000000', { key });
      expect(file.status).toBe(404);
      expect(file.headers.get('x-ratelimit-limit-requests')).toBe('3');
      const unlimited = await kiln.call('GET', '/v1/jobs', { key: await kiln.key('free-org') });
      expect(unlimited.status).toBe(200);
      expect(unlimited.headers.get('x-ratelimit-limit-requests')).toBeNull();
    });

    it('a limit of 0 refuses with no time to retry at: no Retry-After, x-should-retry false, and says so', async () => {
      for (const [i, limits] of [{ requests_per_minute: 0 }, { concurrent: 0 }].entries()) {
        const { key } = await limitedKey(kiln, `zero-org-${i}`, limits);
        const refused = await sleep(key, { ms: 1, mode: 'sync' });
        const name = Object.keys(limits)[0] as string;
        expect(refused.status, name).toBe(429);
        expect(refused.headers.get('retry-after'), name).toBeNull();
        expect(refused.headers.get('retry-after-ms'), name).toBeNull();
        expect(refused.headers.get('x-should-retry'), name).toBe('false');
        expect(refused.body.error.message, name).toMatch(
          /has a limit of 0 .*: nothing is admitted until an admin raises it$/,
        );
        expect(refused.body.error.details[0], name).toMatchObject({ field: name, limit: 0 });
        expect(refused.body.error.details[0].retry_after_ms, name).toBeUndefined();
      }
    });

    it('concurrent: 2 refuses a third async job while two run, and admits again once one ends', async () => {
      const { key } = await limitedKey(kiln, 'conc-org', { concurrent: 2 });
      const a = await sleep(key, { ms: 1500 });
      const b = await sleep(key, { ms: 100 });
      expect([a.status, b.status]).toEqual([202, 202]);
      const third = await sleep(key, { ms: 1 });
      expect(third.status).toBe(429);
      expect(third.body.error.details[0]).toMatchObject({ field: 'concurrent', limit: 2, used: 2 });
      expect(third.headers.get('retry-after')).toBe('1');
      await waitUntil(async () => (await sleep(key, { ms: 1 })).status === 202, { timeoutMs: 10_000 });
    });
  });
}
