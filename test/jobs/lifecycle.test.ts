import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/ids.js';
import type { JobKind } from '../../src/jobs/kinds.js';
import type { ApiKey } from '../../src/store/index.js';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** Polls until the job is terminal (bounded), answering its last poll body. */
async function settle(kiln: TestServer, id: string, key = kiln.adminKey, timeoutMs = 10_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { body } = await kiln.call('GET', `/v1/jobs/${id}`, { key });
    if (['completed', 'failed', 'cancelled', 'timeout'].includes(body.status) || Date.now() > deadline)
      return body;
    await sleep(20);
  }
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`job lifecycle: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let outsider: string;
    const submit = (body: Record<string, unknown>, headers?: Record<string, string>) =>
      kiln.call('POST', '/v1/test/sleep', { body, ...(headers ? { headers } : {}) });

    beforeAll(async () => {
      const kind = sleepKind({ queueTtlMs: 60_000, runLimitMs: 2500 });
      kiln = await startTestServer(
        storeCase,
        {
          'jobs.workers': 4,
          'jobs.lease_seconds': 2,
          'jobs.poll_interval_ms': 200,
          'jobs.sync_timeout': '1s',
        },
        { kinds: [kind], routes: sleepRoutes(kind) },
      );
      outsider = await kiln.key('globex');
    });
    afterAll(async () => kiln?.close());

    it('async: 202 with the submission shape, then polling to completed under either path and id form', async () => {
      const accepted = await submit({ ms: 30 });
      expect(accepted.status).toBe(202);
      const uuid = accepted.body.polling_url.split('/').pop();
      expect(accepted.body).toEqual({
        id: `test-${uuid}`,
        object: 'test.sleep.async',
        status: 'queued',
        polling_url: `/v1/jobs/${uuid}`,
        created: expect.any(Number),
      });
      expect(uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(accepted.headers.get('location')).toBe(accepted.body.polling_url);

      const done = await settle(kiln, uuid);
      expect(done).toMatchObject({
        id: accepted.body.id,
        object: 'job',
        kind: 'test.sleep',
        status: 'completed',
        progress: 1,
      });
      expect(done.result).toEqual({ slept: 30, attempt: 1 });
      expect(done.finished_at).toBeGreaterThanOrEqual(done.started_at);
      for (const path of [
        `/v1/jobs/${accepted.body.id}`,
        `/api/v1/jobs/${uuid}`,
        `/api/v1/jobs/${accepted.body.id}`,
      ]) {
        expect((await kiln.call('GET', path)).body).toEqual(done);
      }
    });

    it("another organisation's job, an unknown id and a wrong prefix are all 404", async () => {
      const { body } = await submit({ ms: 1 });
      const uuid = body.polling_url.split('/').pop();
      for (const [path, key] of [
        [`/v1/jobs/${uuid}`, outsider],
        [`/v1/jobs/chatcmpl-${uuid}`, kiln.adminKey],
        ['/v1/jobs/01a2024f-0000-7000-8000-000000000000', kiln.adminKey],
        ['/v1/jobs/not-an-id', kiln.adminKey],
      ] as const) {
        const answer = await kiln.call('GET', path, { key });
        expect(answer.status, path).toBe(404);
        expect(answer.body.error.code).toBe('not-found');
      }
      expect((await kiln.call('POST', `/v1/jobs/${uuid}/cancel`, { key: outsider })).status).toBe(404);
    });

    it('sync: answers the result itself once the job completes, and the failure as an HTTP error', async () => {
      const ok = await submit({ ms: 10, mode: 'sync' });
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ slept: 10, attempt: 1 });

      const failed = await submit({ ms: 1, mode: 'sync', fail: 'engine exploded' });
      expect(failed.status).toBe(502);
      expect(failed.body.error).toMatchObject({ code: 'inference-failed', message: 'engine exploded' });
      expect(failed.body.job).toMatchObject({
        status: 'failed',
        code: 'inference-failed',
        message: 'engine exploded',
      });
    });

    it('sync stays sync past jobs.sync_timeout: the result, never a 202', async () => {
      const slow = await submit({ ms: 1500, mode: 'sync' }); // jobs.sync_timeout is 1 s
      expect(slow.status).toBe(200);
      expect(slow.body).toEqual({ slept: 1500, attempt: 1 });
    });

    it('Prefer: wait=N on an async submission: the job as its poll answers it within N seconds, else 202 after N', async () => {
      const started = Date.now();
      const slow = await submit({ ms: 2000 }, { prefer: 'wait=1' });
      const waited = Date.now() - started;
      expect(slow.status).toBe(202);
      expect(slow.headers.get('preference-applied')).toBe('wait=1');
      expect(waited).toBeGreaterThanOrEqual(950);
      expect(waited).toBeLessThan(1900);
      // As it stands after the wait: running by now.
      expect(slow.body).toMatchObject({
        object: 'test.sleep.async',
        status: 'running',
        polling_url: expect.any(String),
      });
      expect(slow.headers.get('location')).toBe(slow.body.polling_url);
      expect(await settle(kiln, slow.body.id)).toMatchObject({
        status: 'completed',
        result: { slept: 2000 },
      });
      // Ended in time: 200 and the poll body, its id with it, whatever the outcome.
      const quick = await submit({ ms: 200 }, { prefer: 'respond-async, wait=1' });
      expect(quick.status).toBe(200);
      expect(quick.body).toMatchObject({
        object: 'job',
        status: 'completed',
        result: { slept: 200, attempt: 1 },
      });
      expect(quick.body).toEqual((await kiln.call('GET', `/v1/jobs/${quick.body.id}`)).body);
      const failed = await submit({ ms: 1, fail: 'engine exploded' }, { prefer: 'wait=1' });
      expect(failed.status).toBe(200);
      expect(failed.body).toMatchObject({
        object: 'job',
        status: 'failed',
        code: 'inference-failed',
        message: 'engine exploded',
      });
      // Capped at jobs.sync_timeout (1 s).
      const capped = await submit({ ms: 1500 }, { prefer: 'wait=30' });
      expect(capped.status).toBe(202);
      expect(capped.headers.get('preference-applied')).toBe('wait=1');
    });

    it('a sync caller that goes away cancels its job', async () => {
      const cancelledJobs = async () =>
        (await kiln.call('GET', '/v1/jobs?status=cancelled&limit=100')).body.data.length as number;
      const before = await cancelledJobs();
      const controller = new AbortController();
      const pending = fetch(`${kiln.url}/v1/test/sleep`, {
        method: 'POST',
        headers: { authorization: `Bearer ${kiln.adminKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ms: 2000, mode: 'sync' }),
        signal: controller.signal,
      }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      controller.abort();
      await pending;
      await waitUntil(async () => (await cancelledJobs()) === before + 1, {
        timeoutMs: 5000,
        describe: () => 'the abandoned sync job cancelled',
      });
    });

    it('a failure carries its code, message and extra fields on the poll body', async () => {
      const { body } = await submit({
        ms: 1,
        fail: "value_not_in_list: ckpt_name 'wan2.2.safetensors' not in []",
        code: 'workflow-model-missing',
        extra: {
          model: 'wan-2.2',
          upstreamError: "value_not_in_list: ckpt_name 'wan2.2.safetensors' not in []",
        },
      });
      const done = await settle(kiln, body.id);
      expect(done).toMatchObject({
        status: 'failed',
        code: 'workflow-model-missing',
        model: 'wan-2.2',
        upstreamError: "value_not_in_list: ckpt_name 'wan2.2.safetensors' not in []",
      });
      expect(done).not.toHaveProperty('result');
    });

    it('cancel aborts a running handler; a second cancel is 409 with the job', async () => {
      const { body } = await submit({ ms: 5000 });
      for (
        let i = 0;
        i < 100 && (await kiln.call('GET', `/v1/jobs/${body.id}`)).body.status !== 'running';
        i++
      )
        await sleep(10);
      const started = Date.now();
      const cancelled = await kiln.call('POST', `/v1/jobs/${body.id}/cancel`);
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({ id: body.id, status: 'cancelled', code: 'cancelled' });
      const again = await kiln.call('POST', `/api/v1/jobs/${body.id}/cancel`);
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe('job-already-terminal');
      expect(again.body.job).toEqual(cancelled.body);
      // The handler was aborted: its slot frees up long before its 5 s sleep would have ended.
      const next = await submit({ ms: 1, mode: 'sync' });
      expect(next.status).toBe(200);
      expect(Date.now() - started).toBeLessThan(3000);
      expect((await kiln.call('GET', `/v1/jobs/${body.id}`)).body.status).toBe('cancelled');
    });

    it('a run longer than the kind allows ends timeout', async () => {
      const { body } = await submit({ ms: 5000 }); // the kind's run limit is 2.5 s
      const done = await settle(kiln, body.id);
      expect(done).toMatchObject({ status: 'timeout', code: 'run-timeout' });
      expect(done.finished_at - done.started_at).toBeLessThan(5);
    });

    it('Idempotency-Key: the same body gives the same job; another body is 422', async () => {
      const key = `idem-${storeCase.name}-${Date.now()}`;
      const first = await submit({ ms: 5 }, { 'idempotency-key': key });
      const again = await submit({ ms: 5 }, { 'idempotency-key': key });
      expect(first.status).toBe(202);
      expect(again.status).toBe(202);
      expect(again.body).toEqual(first.body);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(first.headers.get('idempotent-replayed')).toBeNull();

      // Once the job has ended, a retry still gets the first answer: 202, the job and where to poll.
      for (let i = 0; i < 100; i++) {
        if ((await kiln.call('GET', `/v1/jobs/${first.body.id}`)).body.status === 'completed') break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const late = await submit({ ms: 5 }, { 'idempotency-key': key });
      expect(late.status).toBe(202);
      expect(late.headers.get('idempotent-replayed')).toBe('true');
      expect(late.headers.get('location')).toBe(first.headers.get('location'));
      expect(late.body).toEqual(first.body);

      const changed = await submit({ ms: 6 }, { 'idempotency-key': key });
      expect(changed.status).toBe(422);
      expect(changed.body.error.code).toBe('idempotency-key-reused');

      // Concurrent twins still make one job.
      const twinKey = `${key}-twins`;
      const twins = await Promise.all(
        Array.from({ length: 8 }, () => submit({ ms: 5 }, { 'idempotency-key': twinKey })),
      );
      expect(new Set(twins.map((t) => t.body.id)).size).toBe(1);
      const rows = await kiln.server.store.driver.all<{ n: number | string }>(
        'SELECT COUNT(*) AS n FROM idempotency_keys WHERE idem_key = ?',
        [twinKey],
      );
      expect(Number(rows[0]?.n)).toBe(1);

      // Another organisation's identical key is its own.
      const theirs = await kiln.call('POST', '/v1/test/sleep', {
        key: outsider,
        body: { ms: 5 },
        headers: { 'idempotency-key': key },
      });
      expect(theirs.status).toBe(202);
      expect(theirs.body.id).not.toBe(first.body.id);

      const bad = await submit({ ms: 5 }, { 'idempotency-key': 'has space' });
      expect(bad.status).toBe(400);
      expect(bad.body.error.details[0].field).toBe('Idempotency-Key');
    });

    it('a sync original still running answers 409 idempotency-key-in-progress to its retry', async () => {
      const key = `sync-${storeCase.name}-${Date.now()}`;
      const original = submit({ ms: 300, mode: 'sync' }, { 'idempotency-key': key });
      await sleep(100);
      const retry = await submit({ ms: 300, mode: 'sync' }, { 'idempotency-key': key });
      expect(retry.status).toBe(409);
      expect(retry.body.error.code).toBe('idempotency-key-in-progress');
      expect((await original).status).toBe(200);
      const replay = await submit({ ms: 300, mode: 'sync' }, { 'idempotency-key': key });
      expect(replay.status).toBe(200);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
    });

    it('lists the organisation’s jobs newest first, with filters and a cursor', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++)
        ids.push((await submit({ ms: 1, mode: 'sync' })).status === 200 ? 'ok' : 'x');
      const page = await kiln.call('GET', '/v1/jobs?limit=2&status=completed');
      expect(page.status).toBe(200);
      expect(page.body).toMatchObject({ object: 'list', has_more: true });
      expect(page.body.data).toHaveLength(2);
      expect(page.body.data.every((j: { status: string }) => j.status === 'completed')).toBe(true);
      const [a, b] = page.body.data;
      expect(a.id > b.id).toBe(true);
      const next = await kiln.call('GET', `/api/v1/jobs?limit=2&status=completed&after=${page.body.last_id}`);
      expect(next.body.data[0].id < b.id).toBe(true);
      expect(
        (await kiln.call('GET', '/v1/jobs', { key: outsider })).body.data.every((j: { id: string }) =>
          j.id.startsWith('test-'),
        ),
      ).toBe(true);
      expect((await kiln.call('GET', '/v1/jobs?status=nope')).status).toBe(400);
      // A misspelt kind, or a cursor that is no job id (corrupted, truncated), is refused: an empty
      // list would look like no jobs, or the end of them.
      const none = await kiln.call('GET', '/v1/jobs?kind=none');
      expect(none.status).toBe(400);
      expect(none.body.error.details).toEqual([
        expect.objectContaining({ field: 'kind', message: expect.stringContaining('test.sleep') }),
      ]);
      for (const after of ['zzz', 'chatcmpl-xyz', '%20']) {
        const refused = await kiln.call('GET', `/v1/jobs?after=${after}`);
        expect(refused.status).toBe(400);
        expect(refused.body.error.details).toEqual([expect.objectContaining({ field: 'after' })]);
      }
    });

    it('the usage ledger has one row per terminal job, summed per kind, per organisation', async () => {
      const before = (await kiln.call('GET', '/api/v1/usage', { key: outsider })).body;
      await kiln.call('POST', '/v1/test/sleep', { key: outsider, body: { ms: 7, mode: 'sync' } });
      const { body } = await kiln.call('POST', '/v1/test/sleep', { key: outsider, body: { ms: 1 } });
      await settle(kiln, body.id, outsider);
      await kiln.call('GET', `/v1/jobs/${body.id}`, { key: outsider });
      await kiln.call('GET', `/v1/jobs/${body.id}`, { key: outsider });
      const after = (await kiln.call('GET', '/api/v1/usage', { key: outsider })).body;
      const count = (u: any) =>
        u.data.find((d: { kind: string }) => d.kind === 'test.sleep') ?? {
          jobs: 0,
          completed: 0,
          output_units: 0,
        };
      expect(count(after).jobs - count(before).jobs).toBe(2);
      expect(count(after).completed - count(before).completed).toBe(2);
      expect(count(after).output_units - count(before).output_units).toBe(8);
      const rows = await kiln.server.store.driver.all<{ job_id: string; n: number | string }>(
        'SELECT job_id, COUNT(*) AS n FROM usage_ledger GROUP BY job_id HAVING COUNT(*) > 1',
      );
      expect(rows).toEqual([]);
    });

    it('partial output reaches a request waiting on the job', async () => {
      const { jobs, store } = kiln.server.runtime;
      const org = await store.orgs.byName('default');
      const [key] = await store.keys.list(org?.id);
      // A waiting request listens before its job can start, as a stream will.
      const id = uuidv7();
      const parts: unknown[] = [];
      const off = jobs.events.on(id, (event) => {
        if (event.t === 'part') parts.push(event.data);
      });
      await jobs.submit({
        id,
        kind: jobs.kinds.get('test.sleep') as JobKind,
        mode: 'stream',
        caller: key as ApiKey,
        request: { ms: 1, parts: 3 },
      });
      expect((await jobs.waitForTerminal(id, 5000)).status).toBe('completed');
      off();
      expect(parts).toEqual(['{"part":0}', '{"part":1}', '{"part":2}']);
    });

    it('an expired job answers 410', async () => {
      const { body } = await submit({ ms: 1, mode: 'async' });
      const id = body.polling_url.split('/').pop();
      await settle(kiln, id);
      await kiln.server.store.driver.run('UPDATE jobs SET expires_at = ? WHERE id = ?', [Date.now() - 1, id]);
      const gone = await kiln.call('GET', `/v1/jobs/${id}`);
      expect(gone.status).toBe(410);
      expect(gone.body.error.code).toBe('job-expired');
    });
  });
}
