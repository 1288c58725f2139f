import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** What the console reads besides the public API, over HTTP, on both stores. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`console API: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let member: string;
    let other: string;
    let hook: Server;
    let hookUrl: string;
    const kind = sleepKind();

    const sleep = (key: string, body: Record<string, unknown>) =>
      kiln.call('POST', '/v1/test/sleep', { key, body });
    const finished = (key: string, id: string) =>
      waitUntil(
        async () => {
          const poll = await kiln.call('GET', `/v1/jobs/${id}`, { key });
          return ['completed', 'failed'].includes(poll.body.status) ? poll.body : undefined;
        },
        { timeoutMs: 10_000, describe: () => `job ${id} to finish` },
      );

    beforeAll(async () => {
      hook = createServer((_request, response) => response.writeHead(204).end());
      await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
      hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hooks/kiln?token=s3cret`;
      kiln = await startTestServer(
        storeCase,
        { 'security.allow_hosts': ['127.0.0.1'], 'jobs.poll_interval_ms': 50, 'contexts.max_bytes': 4096 },
        { kinds: [kind as never], routes: sleepRoutes(kind) },
      );
      member = await kiln.key('console-org');
      other = await kiln.key('someone-else');
    });
    afterAll(async () => {
      await kiln?.close();
      await new Promise((resolve) => hook?.close(resolve));
    });

    it('GET /api/v1/session says who the key is, its organisation and the context cap', async () => {
      const answer = await kiln.call('GET', '/api/v1/session', { key: member });
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({
        object: 'session',
        key: { role: 'member', tier: 'standard' },
        org: { name: 'console-org' },
        contexts_max_bytes: 4096,
      });
      expect(JSON.stringify(answer.body)).not.toContain(member);
      const admin = await kiln.call('GET', '/api/v1/session', { key: kiln.adminKey });
      expect(admin.body.key.role).toBe('admin');
      expect((await kiln.call('GET', '/api/v1/session', { key: null })).status).toBe(401);
    });

    it('a job’s details: its request with long strings cut, its webhook delivery without the query', async () => {
      const long = 'x'.repeat(5000);
      const submitted = await sleep(member, {
        ms: 10,
        extra: { note: long },
        webhook: { url: hookUrl },
      });
      expect(submitted.status).toBe(202);
      await finished(member, submitted.body.id);
      const details = await waitUntil(
        async () => {
          const answer = await kiln.call('GET', `/api/v1/jobs/${submitted.body.id}/details`, { key: member });
          return answer.body.webhook?.delivery?.status === 'delivered' ? answer : undefined;
        },
        { timeoutMs: 10_000, describe: () => 'the webhook to be delivered' },
      );
      expect(details.status).toBe(200);
      expect(details.body).toMatchObject({
        object: 'job.details',
        job: { id: submitted.body.id, status: 'completed' },
        mode: 'async',
        attempts: 1,
        webhook: {
          url: hookUrl.split('?')[0],
          delivery: { status: 'delivered', attempts: 1, last_status: 204 },
        },
      });
      const shown = JSON.stringify(details.body.request);
      expect(shown).toContain('(5000 characters)');
      expect(shown).not.toContain(long);
      expect(JSON.stringify(details.body)).not.toContain('s3cret');
    });

    it('another organisation’s job is a 404, as is a job that does not exist', async () => {
      const submitted = await sleep(member, { ms: 1 });
      const answer = await kiln.call('GET', `/api/v1/jobs/${submitted.body.id}/details`, { key: other });
      expect(answer.status).toBe(404);
      expect(answer.body.error.code).toBe('not-found');
      const none = await kiln.call('GET', '/api/v1/jobs/job_nothing/details', { key: member });
      expect(none.status).toBe(404);
    });

    it('GET /api/v1/usage/daily: today’s jobs per kind and key, only the organisation’s own', async () => {
      const mine = await kiln.key('usage-org');
      const second = await kiln.key('usage-org');
      for (const key of [mine, mine, second]) await finished(key, (await sleep(key, { ms: 1 })).body.id);
      await finished(other, (await sleep(other, { ms: 1 })).body.id);
      const answer = await kiln.call('GET', '/api/v1/usage/daily?days=2', { key: mine });
      expect(answer.status).toBe(200);
      const today = new Date().toISOString().slice(0, 10);
      const rows = answer.body.data as Array<{ day: string; kind: string; jobs: number; key_id: string }>;
      expect(rows.every((r) => r.day === today && r.kind === 'test.sleep')).toBe(true);
      expect(rows.map((r) => r.jobs).sort()).toEqual([1, 2]);
      expect(new Set(rows.map((r) => r.key_id)).size).toBe(2);
      expect(answer.body.until - answer.body.since).toBeLessThanOrEqual(2 * 86_400);
      // A window before any job: nothing.
      const past = await kiln.call('GET', '/api/v1/usage/daily?days=1&until=86400', { key: mine });
      expect(past.body.data).toEqual([]);
      // `until` at midnight ends the day before it: one day asked is that whole day, the jobs of today
      // among them when it is tomorrow's midnight.
      expect(past.body.since).toBe(0);
      const midnight = (Math.floor(Date.now() / 86_400_000) + 1) * 86_400;
      const day = await kiln.call('GET', `/api/v1/usage/daily?days=1&until=${midnight}`, { key: mine });
      expect(day.body.since).toBe(midnight - 86_400);
      expect(day.body.data.map((r: { jobs: number }) => r.jobs).sort()).toEqual([1, 2]);
    });

    it('refuses bad usage/daily queries with 400 and the field', async () => {
      for (const query of ['days=0', 'days=367', 'days=abc', 'until=-1', 'extra=1']) {
        const answer = await kiln.call('GET', `/api/v1/usage/daily?${query}`, { key: member });
        expect(answer.status, query).toBe(400);
        expect(answer.body.error.code, query).toBe('validation-failed');
      }
    });

    it('GET /admin/v1/fleet: pools and runners for an admin key, 403 for a member', async () => {
      const admin = await kiln.call('GET', '/admin/v1/fleet', { key: kiln.adminKey });
      expect(admin.status).toBe(200);
      expect(admin.body.object).toBe('fleet');
      expect(Array.isArray(admin.body.pools)).toBe(true);
      expect(Array.isArray(admin.body.runners)).toBe(true);
      const forbidden = await kiln.call('GET', '/admin/v1/fleet', { key: member });
      expect(forbidden.status).toBe(403);
      expect(forbidden.body.error.code).toBe('forbidden');
      // It takes no query: a parameter is refused, as on every other route, not ignored.
      const asked = await kiln.call('GET', '/admin/v1/fleet?pool=x', { key: kiln.adminKey });
      expect(asked.status).toBe(400);
      expect(asked.body.error.details).toEqual([expect.objectContaining({ field: 'pool' })]);
    });
  });
}
