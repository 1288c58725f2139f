import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/ids.js';
import { ORPHAN_SWEEP_EVERY_MS, PURGE_STEP, Purger } from '../../src/retention/purge.js';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { statusOf } from '../helpers/http.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

const silent = { info() {}, error() {} } as never;
/** A purger of the test's own: `jobsKeptMs` as the server's `jobs.retention`. */
const SETTINGS = { intervalMs: 1000, deliveriesKeptMs: 60_000, jobsKeptMs: 3000 };

/**
 * Retention on both stores: a job past `jobs.retention` is purged with its produced file within
 * a purge interval, while its usage stays; DELETE does the same at once; idempotency records and
 * finished webhook deliveries go after theirs; a poll always carries a freshly signed URL.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`retention and purge: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let comfy: ComfySim;
    let configDir: string;
    let member: string;
    let hook: Server;
    let hookUrl: string;
    let hookAnswers = 204;
    let hookHits = 0;

    const image = async (
      key: string,
      extra: Record<string, unknown> = {},
      headers: Record<string, string> = {},
    ) => {
      const submitted = await kiln.call('POST', '/v1/images/generations', {
        key,
        headers,
        body: { model: 'sdxl', prompt: 'a kiln at dusk', mode: 'async', ...extra },
      });
      expect(submitted.status).toBe(202);
      return submitted.body.id as string;
    };
    const completed = (key: string, id: string) =>
      waitUntil(
        async () => {
          const poll = await kiln.call('GET', `/v1/jobs/${id}`, { key });
          return poll.body.status === 'completed' ? poll.body : undefined;
        },
        { timeoutMs: 15_000, describe: () => `job ${id} to complete` },
      );
    const fileOnDisk = async (id: string) => {
      const [file] = await kiln.server.store.files.byJob(
        (await kiln.server.store.jobs.byId(id.replace(/^[a-z]+-/, '')))?.org_id ?? '',
        id.replace(/^[a-z]+-/, ''),
      );
      expect(file).toBeDefined();
      return path.join(kiln.dataDir, 'files', file?.storage_key ?? '');
    };

    beforeAll(async () => {
      comfy = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2 });
      hook = createServer((request, response) => {
        hookHits++;
        request.resume().on('end', () => response.writeHead(hookAnswers).end());
      });
      await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
      hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
      configDir = mkdtempSync(path.join(tmpdir(), 'kiln-retention-'));
      const configFile = path.join(configDir, 'kiln.yaml');
      writeFileSync(configFile, JSON.stringify({ runners: { gpu: { url: comfy.url, models: ['sdxl'] } } }));
      kiln = await startTestServer(
        storeCase,
        {
          'jobs.retention': '3s',
          'jobs.purge_interval': '500ms',
          'jobs.poll_interval_ms': 50,
          'files.url_ttl': '10s',
          'webhooks.retry_schedule': ['1s'],
          'webhooks.jitter': 0,
          'security.allow_hosts': ['127.0.0.1'],
        },
        { configFile },
      );
      member = await kiln.key('retention');
    }, 30_000);
    afterAll(async () => {
      await kiln?.close();
      await comfy?.close();
      hook?.closeAllConnections();
      await new Promise((resolve) => hook?.close(resolve));
      rmSync(configDir, { recursive: true, force: true });
    });

    it('a job past retention answers 410, also once purged; its file is gone from disk and its URL 404s; its usage stays', async () => {
      const id = await image(member);
      const done = await completed(member, id);
      const url = done.result.data[0].url as string;
      const onDisk = await fileOnDisk(id);
      expect(existsSync(onDisk)).toBe(true);
      expect(await statusOf(url)).toBe(200);
      const usageBefore = await kiln.call('GET', '/api/v1/usage', { key: member });

      const bare = id.replace(/^[a-z]+-/, '');
      const purged = await waitUntil(
        async () => ((await kiln.server.store.jobs.byId(bare)) === undefined ? true : undefined),
        { timeoutMs: 40_000, intervalMs: 250, describe: () => `job ${id} to be purged` },
      );
      expect(purged).toBe(true);
      // Its row is gone, and its poll still says it expired (DESIGN: kept `jobs.retention`, then
      // 410), by public and by bare id, to its own organisation only; another kind's prefix is 404.
      for (const ref of [id, bare]) {
        const gone = await kiln.call('GET', `/v1/jobs/${ref}`, { key: member });
        expect([gone.status, gone.body.error?.code], ref).toEqual([410, 'job-expired']);
      }
      const stranger = await kiln.key('stranger-after-purge');
      expect((await kiln.call('GET', `/v1/jobs/${id}`, { key: stranger })).status).toBe(404);
      expect((await kiln.call('GET', `/v1/jobs/vidgen-${bare}`, { key: member })).status).toBe(404);
      expect((await kiln.call('POST', `/v1/jobs/${id}/cancel`, { key: member })).status).toBe(410);
      expect(existsSync(onDisk)).toBe(false);
      expect(await statusOf(url)).toBe(404);
      expect(await kiln.server.store.files.byJob('', id)).toEqual([]);
      const usageAfter = await kiln.call('GET', '/api/v1/usage', { key: member });
      expect(usageAfter.body.data).toEqual(usageBefore.body.data);
      const daily = await kiln.call('GET', '/api/v1/usage/daily?days=1', { key: member });
      expect(daily.body.data).toEqual([expect.objectContaining({ kind: 'image.generation', jobs: 1 })]);
    }, 60_000);

    it('a poll carries a freshly signed URL, not the one stored when the job finished', async () => {
      const id = await image(member);
      const done = await completed(member, id);
      const expiresOf = (url: string) => Number(new URL(url).searchParams.get('expires'));
      const first = done.result.data[0].url as string;
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const again = await kiln.call('GET', `/v1/jobs/${id}`, { key: member });
      const fresh = again.body.result.data[0].url as string;
      expect(expiresOf(fresh)).toBeGreaterThan(expiresOf(first));
      expect(await statusOf(fresh)).toBe(200);
    });

    it('DELETE of a job gives up its pending webhook and erases what its deliveries carried', async () => {
      hookAnswers = 503;
      const id = await image(member, { webhook: { url: hookUrl } });
      await completed(member, id);
      const jobId = id.replace(/^[a-z]+-/, '');
      const { webhooks } = kiln.server.store;
      await waitUntil(async () => ((await webhooks.forJob(jobId))?.attempts ?? 0) >= 1 || undefined, {
        timeoutMs: 10_000,
      });
      expect((await kiln.call('DELETE', `/v1/jobs/${id}`, { key: member })).status).toBe(200);
      const hits = hookHits;
      expect(await webhooks.forJob(jobId)).toMatchObject({
        status: 'failed',
        last_error: 'not sent: its job was deleted',
      });
      const body = await kiln.server.store.driver.get<{ body: string }>(
        'SELECT body FROM webhook_deliveries WHERE job_id = ?',
        [jobId],
      );
      expect(body?.body).toBe('{}');
      // Past the retry schedule's 1 s: nothing more was sent.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      expect(hookHits).toBe(hits);
      hookAnswers = 204;
    });

    it('DELETE of a file and of a terminal job work at once; another organisation gets 404', async () => {
      const stranger = await kiln.key('stranger');
      const id = await image(member);
      const done = await completed(member, id);
      const fileId = done.result.data[0].file_id as string;
      const onDisk = await fileOnDisk(id);
      expect((await kiln.call('DELETE', `/v1/files/${fileId}`, { key: stranger })).status).toBe(404);
      expect((await kiln.call('DELETE', `/v1/jobs/${id}`, { key: stranger })).status).toBe(404);
      expect((await kiln.call('DELETE', `/v1/files/${fileId}`, { key: member })).status).toBe(200);
      expect(existsSync(onDisk)).toBe(false);
      expect((await kiln.call('DELETE', `/v1/jobs/${id}`, { key: member })).status).toBe(200);
      expect((await kiln.call('GET', `/v1/jobs/${id}`, { key: member })).status).toBe(410);
    });

    it('a job waits for its pending webhook; idempotency records go after a day, not with their purged job, and finished deliveries after their retention', async () => {
      const { store, runtime } = kiln.server;
      hookAnswers = 503;
      const id = await image(member, { webhook: { url: hookUrl } }, { 'Idempotency-Key': 'purge-me' });
      await completed(member, id);
      const jobId = id.replace(/^[a-z]+-/, '');
      const purger = new Purger(store, runtime.files, SETTINGS, silent);
      // Past its retention, but its delivery is still being retried: it stays.
      const later = Date.now() + 10_000;
      await purger.purge(later);
      expect(await store.jobs.byId(jobId)).toBeDefined();
      expect((await store.webhooks.forJob(jobId))?.status).toBe('pending');
      // The delivery ends (the schedule's one retry fails): then the job and its delivery go.
      await waitUntil(
        async () => ((await store.webhooks.forJob(jobId))?.status === 'failed' ? true : undefined),
        {
          timeoutMs: 10_000,
        },
      );
      const purged = await purger.purge(Date.now() + 10_000);
      expect(purged.jobs).toBeGreaterThanOrEqual(1);
      expect(await store.jobs.byId(jobId)).toBeUndefined();
      expect(await store.webhooks.forJob(jobId)).toBeUndefined();
      // Its key stays for its day: a retry is told the job expired, and nothing runs again.
      expect(
        await store.idempotency.find((await store.orgs.byName('retention'))?.id ?? '', 'purge-me', 0),
      ).toBeDefined();
      const jobsBefore = (await kiln.call('GET', '/v1/jobs?limit=100', { key: member })).body.data.length;
      const retried = await kiln.call('POST', '/v1/images/generations', {
        key: member,
        headers: { 'Idempotency-Key': 'purge-me' },
        body: { model: 'sdxl', prompt: 'a kiln at dusk', mode: 'async', webhook: { url: hookUrl } },
      });
      expect(retried.status).toBe(410);
      expect(retried.body.error.code).toBe('job-expired');
      expect((await kiln.call('GET', '/v1/jobs?limit=100', { key: member })).body.data).toHaveLength(
        jobsBefore,
      );
      hookAnswers = 204;

      // A kept job's idempotency record goes after a day, its delivered webhook after its retention.
      const kept = await image(member, { webhook: { url: hookUrl } }, { 'Idempotency-Key': 'keep-job' });
      await completed(member, kept);
      const keptId = kept.replace(/^[a-z]+-/, '');
      await waitUntil(
        async () => ((await store.webhooks.forJob(keptId))?.status === 'delivered' ? true : undefined),
        {
          timeoutMs: 10_000,
        },
      );
      const orgId = (await store.orgs.byName('retention'))?.id ?? '';
      const dayAgo = Date.now() - 86_400_000;
      expect(await store.retention.pruneIdempotency(dayAgo, 200)).toBe(0);
      expect(await store.idempotency.find(orgId, 'keep-job', 0)).toBeDefined();
      expect(await store.retention.pruneIdempotency(Date.now() + 1, 200)).toBeGreaterThanOrEqual(1);
      expect(await store.idempotency.find(orgId, 'keep-job', 0)).toBeUndefined();
      expect(await store.retention.pruneDeliveries(Date.now() + 1, 200)).toBeGreaterThanOrEqual(1);
      expect(await store.webhooks.forJob(keptId)).toBeUndefined();
      expect(await store.jobs.byId(keptId)).toBeDefined();
    }, 30_000);

    it('stored files no row names (a restore from an older backup) go once older than jobs.retention, at the first pass and daily; the rest stay', async () => {
      const { store, runtime } = kiln.server;
      const orgId = (await store.orgs.byName('retention'))?.id as string;
      const dir = path.join(kiln.dataDir, 'files');
      const stored = (name: string, shard = name.slice(-2)) => {
        const file = path.join(dir, shard, name);
        mkdirSync(path.dirname(file), { recursive: true });
        writeFileSync(file, 'png');
        return file;
      };
      const fileId = () => `file_${uuidv7().replaceAll('-', '')}`;
      // Past the server's 3 s retention, and past the hour the sweep leaves a file in any case.
      const agedPast = (file: string) => {
        const old = new Date(Date.now() - 2 * 3_600_000);
        utimesSync(file, old, old);
      };
      const keptId = fileId();
      const kept = stored(keptId);
      await store.files.insert({
        id: keptId,
        org_id: orgId,
        job_id: null,
        content_type: 'image/png',
        size_bytes: 3,
        sha256: '0'.repeat(64),
        storage_key: `${keptId.slice(-2)}/${keptId}`,
        width: null,
        height: null,
        duration_ms: null,
        fps: null,
        created_at: Date.now(),
      });
      const orphan = stored(fileId());
      const young = stored(fileId());
      const notKilns = stored('operator-notes', 'xx');
      for (const file of [kept, orphan, notKilns]) agedPast(file);

      const purger = new Purger(store, runtime.files, SETTINGS, silent);
      expect((await purger.purge()).orphans).toBe(1);
      expect([kept, orphan, young, notKilns].map((file) => existsSync(file))).toEqual([
        true,
        false,
        true,
        true,
      ]);
      // Past retention now, but the next sweep is a day after the first.
      agedPast(young);
      expect((await purger.purge()).orphans).toBe(0);
      expect(existsSync(young)).toBe(true);
      expect((await purger.purge(Date.now() + ORPHAN_SWEEP_EVERY_MS)).orphans).toBe(1);
      expect([kept, young, notKilns].map((file) => existsSync(file))).toEqual([true, false, true]);
    });

    it('a backlog of expired jobs larger than two steps of the purge is purged whole in one pass', async () => {
      const { store, runtime } = kiln.server;
      const orgId = (await store.orgs.byName('retention'))?.id as string;
      // Expiring a minute from now: the server's own purger leaves them to this one.
      const expiresAt = Date.now() + 60_000;
      const ids = Array.from({ length: PURGE_STEP * 2 + 5 }, () => uuidv7());
      const big = JSON.stringify({ prompt: 'x'.repeat(100_000) });
      for (const id of ids)
        await store.driver.run(
          `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, result, max_attempts,
             queue_deadline, run_limit_ms, created_at, finished_at, expires_at)
           VALUES (?, ?, 'key', 'chat.completion', 'async', 'completed', ?, ?, 1, ?, 1000, ?, ?, ?)`,
          [id, orgId, big, big, expiresAt, expiresAt - 4000, expiresAt - 3000, expiresAt],
        );
      const purger = new Purger(store, runtime.files, SETTINGS, silent);
      const purged = await purger.purge(expiresAt + 1);
      expect(purged.jobs).toBeGreaterThanOrEqual(ids.length);
      const left = await store.driver.all<{ id: string }>(
        `SELECT id FROM jobs WHERE id IN (${ids.map(() => '?').join(', ')})`,
        ids,
      );
      expect(left).toEqual([]);
    });

    it('dating many jobs by a new retention lets the event loop run between its steps', async () => {
      const { store, runtime } = kiln.server;
      const orgId = (await store.orgs.byName('retention'))?.id as string;
      const finishedAt = Date.now();
      for (let i = 0; i < 600; i++)
        await store.driver.run(
          `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, result, max_attempts,
             queue_deadline, run_limit_ms, created_at, finished_at, expires_at)
           VALUES (?, ?, 'key', 'chat.completion', 'async', 'completed', '{"model":"m"}', '{}', 1, ?, 1000, ?, ?, ?)`,
          [uuidv7(), orgId, finishedAt, finishedAt, finishedAt, finishedAt + 3000],
        );
      // SQLite runs each step synchronously: without a pause between steps, nothing else would.
      let turns = 0;
      const counting = setInterval(() => turns++, 0);
      const longer = new Purger(store, runtime.files, { ...SETTINGS, jobsKeptMs: 7_200_000 }, silent);
      const purged = await longer.purge();
      clearInterval(counting);
      expect(purged.redated).toBeGreaterThanOrEqual(600);
      expect(turns).toBeGreaterThanOrEqual(2);
    });

    // Last: it dates every job in the store by other retentions than the server's.
    it('a changed jobs.retention holds for jobs that ended before it, longer or shorter; a deleted job stays expired', async () => {
      const { store, runtime } = kiln.server;
      const orgId = (await store.orgs.byName('retention'))?.id as string;
      // Ended 1.5 s ago and dated by the server's 3 s retention, as the server would have: 1.5 s
      // before that date passes (and the server's own purger takes the job), 0.5 s past the
      // shorter retention below.
      const ended = (id: string, finishedAt: number) =>
        store.driver.run(
          `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, result, max_attempts,
             queue_deadline, run_limit_ms, created_at, finished_at, expires_at)
           VALUES (?, ?, 'key', 'chat.completion', 'async', 'completed', '{"model":"m"}', '{}', 1, ?, 1000, ?, ?, ?)`,
          [id, orgId, finishedAt, finishedAt - 1000, finishedAt, finishedAt + 3000],
        );
      const [kept, deleted, late] = [uuidv7(), uuidv7(), uuidv7()];
      const finishedAt = Date.now() - 1500;
      await ended(kept, finishedAt);
      await ended(deleted, finishedAt);
      expect(await store.jobs.forget(orgId, deleted)).toBe(true);
      const expiry = async (id: string) => (await store.jobs.byId(id))?.expires_at;

      const longer = new Purger(store, runtime.files, { ...SETTINGS, jobsKeptMs: 3_600_000 }, silent);
      expect((await longer.purge()).redated).toBeGreaterThanOrEqual(1);
      expect(await expiry(kept)).toBe(finishedAt + 3_600_000);
      // Not brought back: expired as of its end, it went with this pass.
      expect(await store.jobs.byId(deleted)).toBeUndefined();
      const poll = await kiln.call('GET', `/v1/jobs/${kept}`, { key: await kiln.key('retention') });
      expect(poll.status).toBe(200);

      // Restarted one by one: a process still on the 3 s retention ends a job meanwhile; the next
      // process started with the hour dates that one too, and only that one.
      const lateFinishedAt = Date.now() - 1500;
      await ended(late, lateFinishedAt);
      const next = new Purger(store, runtime.files, { ...SETTINGS, jobsKeptMs: 3_600_000 }, silent);
      expect((await next.purge()).redated).toBe(1);
      expect(await expiry(late)).toBe(lateFinishedAt + 3_600_000);
      // A shorter one expires the jobs, and the same pass purges them.
      const shorter = new Purger(store, runtime.files, { ...SETTINGS, jobsKeptMs: 1000 }, silent);
      const purged = await shorter.purge();
      expect(purged.redated).toBeGreaterThanOrEqual(2);
      expect(await store.jobs.byId(kept)).toBeUndefined();
      expect(await store.jobs.byId(late)).toBeUndefined();
    });
  });
}
