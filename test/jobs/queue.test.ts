import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { watchForEnd } from '../../src/api/stream.js';
import { uuidv7 } from '../../src/ids.js';
import type { JobService } from '../../src/jobs/service.js';
import { Sweeper } from '../../src/jobs/sweeper.js';
import { Worker } from '../../src/jobs/worker.js';
import type { ApiKey, JobRow, Store } from '../../src/store/index.js';
import { sleepKind } from '../fixtures/sleep-kind.js';
import { jobsOnFreshStore } from '../helpers/jobs.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * The queue's statements and the sweeper against each store: leases, terminal states, lost workers,
 * and a job's end read from the store by the request that waits for it.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`job queue: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let jobs: JobService;
    let orgId: string;
    let caller: ApiKey;
    const kind = sleepKind({ queueTtlMs: 60_000, runLimitMs: 60_000 });

    beforeEach(async () => {
      ({ store, jobs, orgId, caller, close } = await jobsOnFreshStore(storeCase, [kind]));
    });
    afterEach(async () => close());

    const submit = async (request: unknown = { ms: 1 }) =>
      (
        await jobs.submit({
          kind: kind as never,
          mode: 'async',
          caller,
          request,
        })
      ).job;
    const claim = (owner: string, leaseMs = 60_000) =>
      store.jobs.claimNext(owner, ['test.sleep'], Date.now(), Date.now() + leaseMs);

    it('claims each job once, oldest first, and only jobs of the kinds asked for', async () => {
      const a = await submit();
      const b = await submit();
      expect(await store.jobs.claimNext('w1', ['other.kind'], Date.now(), Date.now() + 1000)).toBeUndefined();
      const first = await claim('w1');
      const second = await claim('w2');
      expect([first?.id, second?.id]).toEqual([a.id, b.id]);
      expect(first).toMatchObject({ status: 'running', lease_owner: 'w1', attempts: 1 });
      expect(await claim('w3')).toBeUndefined();
    });

    it('only the lease holder can finish a running job, and a terminal job never changes again', async () => {
      const job = await submit();
      await claim('w1');
      expect(
        await jobs.finish(
          job.id,
          { by: 'worker', owner: 'intruder', attempt: 1 },
          { status: 'completed', result: 1 },
        ),
      ).toBeUndefined();
      expect(
        await store.jobs.renewLeases('intruder', [{ id: job.id, attempt: 1 }], Date.now() + 1000),
      ).toEqual(new Set());
      const done = await jobs.finish(
        job.id,
        { by: 'worker', owner: 'w1', attempt: 1 },
        { status: 'completed', result: { ok: true } },
      );
      expect(done?.status).toBe('completed');
      for (const guard of [
        { by: 'worker', owner: 'w1', attempt: 1 },
        { by: 'cancel', orgId },
        { by: 'queue-ttl', now: Date.now() + 1e9 },
      ] as const) {
        expect(
          await jobs.finish(job.id, guard, { status: 'failed', error: { code: 'x', message: 'y' } }),
        ).toBeUndefined();
      }
      expect(await store.jobs.renewLeases('w1', [{ id: job.id, attempt: 1 }], Date.now() + 1000)).toEqual(
        new Set(),
      );
      expect((await store.jobs.byId(job.id))?.result).toBe('{"ok":true}');
      expect(await store.usage.countForJob(job.id)).toBe(1);
    });

    it('a worker running 1,000 jobs renews every lease in one call, and no lease it does not hold', async () => {
      // More runs than one SQLite expression of a term per run can hold (997; jobs.workers allows 1,024).
      await Promise.all(Array.from({ length: 1001 }, () => submit()));
      const mine: JobRow[] = [];
      for (let i = 0; i < 1000; i++) mine.push((await claim('w1')) as JobRow);
      const theirs = (await claim('w2')) as JobRow;
      const leaseUntil = Date.now() + 3_600_000;
      const held = await store.jobs.renewLeases(
        'w1',
        [...mine, theirs].map((job) => ({ id: job.id, attempt: job.attempts })),
        leaseUntil,
      );
      expect(held).toEqual(new Set(mine.map((job) => job.id)));
      const leases = await store.driver.all<{ id: string; lease_expires_at: number }>(
        `SELECT id, lease_expires_at FROM jobs WHERE status = 'running'`,
      );
      const extended = leases
        .filter((row) => Number(row.lease_expires_at) === leaseUntil)
        .map((row) => row.id);
      expect(new Set(extended)).toEqual(held);
      // A pair whose attempt is not the job's renews nothing.
      const first = mine[0] as JobRow;
      expect(
        await store.jobs.renewLeases('w1', [{ id: first.id, attempt: first.attempts + 1 }], leaseUntil + 1),
      ).toEqual(new Set());
    });

    it('the terminal row its runner is answered, built from the row it holds, is the row the store keeps', async () => {
      for (const [status, outcome] of [
        [
          'completed',
          { status: 'completed', result: { text: 'héllo 🔥' }, meta: { route: { engine: 'e' } } },
        ],
        [
          'failed',
          { status: 'failed', error: { code: 'inference-failed', message: 'no', details: { a: 1 } } },
        ],
      ] as const) {
        await submit();
        const held = (await claim('w1')) as JobRow;
        // The run moves its progress meanwhile: the answer must carry the store's value.
        await store.jobs.setProgress(held.id, 'w1', held.attempts, 0.5);
        const done = await jobs.finish(
          held.id,
          { by: 'worker', owner: 'w1', attempt: 1 },
          outcome,
          false,
          held,
        );
        expect(done?.status, status).toBe(status);
        expect(done, status).toEqual(await store.jobs.byId(held.id));
        expect(await store.usage.countForJob(held.id), status).toBe(1);
      }
    });

    it('runs that end together each end as their own: result, usage units, a guard that no longer holds', async () => {
      const held: JobRow[] = [];
      for (let i = 0; i < 6; i++) {
        await submit();
        held.push((await claim('w1')) as JobRow);
      }
      // Cancelled while it runs: its run's end must not land, nor hold up the others'.
      const cancelled = held[2] as JobRow;
      await jobs.cancel(orgId, cancelled.id);
      const ends = await Promise.all(
        held.map((job, i) =>
          jobs.finish(
            job.id,
            { by: 'worker', owner: 'w1', attempt: 1 },
            { status: 'completed', result: { i }, usage: { inputUnits: 10 + i, outputUnits: i } },
            false,
            job,
          ),
        ),
      );
      const ledger = await store.driver.all<{ job_id: string; input_units: number; output_units: number }>(
        'SELECT job_id, input_units, output_units FROM usage_ledger',
      );
      for (const [i, job] of held.entries()) {
        const stored = await store.jobs.byId(job.id);
        const units = ledger.filter((row) => row.job_id === job.id).map((row) => Number(row.input_units));
        if (job === cancelled) {
          expect(ends[i]).toBeUndefined();
          expect(stored?.status).toBe('cancelled');
          expect(units).toEqual([0]);
        } else {
          expect(ends[i]).toEqual(stored);
          expect(stored?.result).toBe(JSON.stringify({ i }));
          expect(units).toEqual([10 + i]);
        }
      }
    });

    it('one run’s end the store refuses fails no other run ending with it', async () => {
      const held: JobRow[] = [];
      for (let i = 0; i < 3; i++) {
        await submit();
        held.push((await claim('w1')) as JobRow);
      }
      // PostgreSQL refuses a NUL in text (the worker replaces it; this end comes straight here).
      const ends = await Promise.allSettled(
        held.map((job, i) =>
          jobs.finish(
            job.id,
            { by: 'worker', owner: 'w1', attempt: 1 },
            i === 1
              ? { status: 'failed', error: { code: 'inference-failed', message: 'nul \u0000 here' } }
              : { status: 'completed', result: { i } },
            false,
            job,
          ),
        ),
      );
      for (const i of [0, 2]) {
        expect(ends[i]).toMatchObject({ status: 'fulfilled', value: { status: 'completed' } });
        expect((await store.jobs.byId(held[i]?.id as string))?.status).toBe('completed');
      }
    });

    it('a run whose lease lapsed cannot finish or renew after the same worker reclaimed the job', async () => {
      const job = await submit();
      await claim('w1', -1);
      await new Sweeper(jobs, 1_000_000, pino({ level: 'silent' })).sweep();
      expect(await claim('w1')).toMatchObject({ id: job.id, attempts: 2 });
      const stale = { by: 'worker', owner: 'w1', attempt: 1 } as const;
      expect(await jobs.finish(job.id, stale, { status: 'completed', result: 'stale' })).toBeUndefined();
      expect(await store.jobs.renewLeases('w1', [{ id: job.id, attempt: 1 }], Date.now() + 1000)).toEqual(
        new Set(),
      );
      expect(await store.jobs.renewLeases('w1', [{ id: job.id, attempt: 2 }], Date.now() + 1000)).toEqual(
        new Set([job.id]),
      );
      const done = await jobs.finish(
        job.id,
        { ...stale, attempt: 2 },
        { status: 'completed', result: 'fresh' },
      );
      expect(done?.result).toBe('"fresh"');
    });

    it('a store error while recording an outcome is not a failed job: the job runs again after its lease', async () => {
      const job = await submit();
      const realFinish = jobs.finish.bind(jobs);
      let failures = 1;
      jobs.finish = async (...args) => {
        if (args[1].by === 'worker' && failures-- > 0) throw new Error('connection lost while committing');
        return realFinish(...args);
      };
      const log = pino({ level: 'silent' });
      const worker = new Worker(jobs, { concurrency: 1, leaseMs: 300, pollIntervalMs: 50 }, log);
      const sweeper = new Sweeper(jobs, 100, log);
      await worker.start();
      sweeper.start();
      try {
        const done = await jobs.waitForTerminal(job.id, 10_000);
        expect(done).toMatchObject({ status: 'completed', attempts: 2 });
        expect(await store.usage.countForJob(job.id)).toBe(1);
      } finally {
        sweeper.stop();
        await worker.stop();
      }
    });

    it('concurrent claimers never take the same job', async () => {
      for (let i = 0; i < 60; i++) await submit();
      const claimed = await Promise.all(Array.from({ length: 80 }, (_, i) => claim(`w${i % 7}`)));
      const ids = claimed.filter((j): j is JobRow => j !== undefined).map((j) => j.id);
      expect(ids).toHaveLength(60);
      expect(new Set(ids).size).toBe(60);
    });

    it('a job whose worker died is requeued, then failed worker-lost after its attempts', async () => {
      const job = await submit();
      const sweeper = new Sweeper(jobs, 1_000_000, pino({ level: 'silent' }));
      for (let attempt = 1; attempt <= 3; attempt++) {
        const claimed = await claim(`dead-worker-${attempt}`, -1); // a lease that has already expired
        expect(claimed).toMatchObject({ id: job.id, attempts: attempt });
        await sweeper.sweep();
        const row = (await store.jobs.byId(job.id)) as JobRow;
        expect(row.status).toBe(attempt < 3 ? 'queued' : 'failed');
      }
      const failed = (await store.jobs.byId(job.id)) as JobRow;
      expect(failed).toMatchObject({ error_code: 'worker-lost', attempts: 3, lease_owner: null });
      expect(await store.usage.countForJob(job.id)).toBe(1);
    });

    it('a job nobody claims within its queue TTL ends timeout', async () => {
      const id = uuidv7();
      const now = Date.now();
      await store.jobs.insert({
        id,
        org_id: orgId,
        key_id: 'key_test',
        kind: 'test.sleep',
        mode: 'async',
        request: '{"ms":1}',
        max_attempts: 3,
        queue_deadline: now - 1,
        run_limit_ms: 1000,
        created_at: now - 10,
        webhook_url: null,
        webhook_secret: null,
      });
      expect(await claim('w1')).toBeUndefined();
      await new Sweeper(jobs, 1_000_000, pino({ level: 'silent' })).sweep();
      expect(await store.jobs.byId(id)).toMatchObject({ status: 'timeout', error_code: 'queue-timeout' });
    });

    it('cancel wins over a worker finishing later, and writes one usage row', async () => {
      const job = await submit();
      await claim('w1');
      const cancelled = await jobs.cancel(orgId, job.id);
      expect(cancelled.status).toBe('cancelled');
      expect(
        await jobs.finish(
          job.id,
          { by: 'worker', owner: 'w1', attempt: 1 },
          { status: 'completed', result: 1 },
        ),
      ).toBeUndefined();
      expect((await store.jobs.byId(job.id))?.status).toBe('cancelled');
      expect(await store.usage.countForJob(job.id)).toBe(1);
    });

    it('a graceful shutdown hands running jobs back without counting the attempt', async () => {
      const job = await submit();
      await claim('w1');
      expect(await store.jobs.release('w1', Date.now())).toBe(1);
      expect(await store.jobs.byId(job.id)).toMatchObject({
        status: 'queued',
        attempts: 0,
        lease_owner: null,
      });
    });

    describe("a job's end that reaches its waiting request only through the store", () => {
      // What a done event lost between processes, or a job run elsewhere, leaves: the store, read
      // every so often, ends a stream or answers a sync request with the job's whole terminal row.
      // Each job carries a request as large as a long prompt: the reads take its status, then its row.
      const longPrompt = { ms: 1, prompt: 'x'.repeat(100_000) };
      const stops: Array<() => void> = [];
      afterEach(() => {
        for (const stop of stops.splice(0)) stop();
      });
      const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      /** Cancelled by a write of the store alone: no event reaches this process. */
      const endInStore = (id: string) =>
        store.jobs.finish(id, { by: 'cancel', orgId }, { status: 'cancelled' }, Date.now(), 60_000);
      /** A job and the rows a stream's watch on it calls `ended` with. */
      const watched = async () => {
        const job = await submit(longPrompt);
        const ends: JobRow[] = [];
        stops.push(watchForEnd(jobs, job.id, 20, 0, (row) => ends.push(row)));
        return { job, ends };
      };

      it('a job ended in the store with no event ends its stream once, with the whole terminal row', async () => {
        const { job, ends } = await watched();
        await sleep(100);
        expect(ends).toEqual([]);
        await endInStore(job.id);
        const deadline = Date.now() + 5_000;
        while (ends.length === 0 && Date.now() < deadline) await sleep(10);
        await sleep(100);
        expect(ends).toHaveLength(1);
        expect(ends[0]).toEqual(await store.jobs.byId(job.id));
        expect(ends[0]?.status).toBe('cancelled');
        expect(JSON.parse(ends[0]?.request as string).prompt).toHaveLength(100_000);
      });

      it('a stream that stopped watching is not ended by its job ending later', async () => {
        const { job, ends } = await watched();
        stops.pop()?.();
        await endInStore(job.id);
        await sleep(200);
        expect(ends).toEqual([]);
      });

      it('a request waiting for a job that ended in the store is answered its whole terminal row', async () => {
        const job = await submit(longPrompt);
        await endInStore(job.id);
        const started = Date.now();
        const answer = await jobs.waitForTerminal(job.id, 10_000);
        // At its first read, not when its wait runs out.
        expect(Date.now() - started).toBeLessThan(5_000);
        expect(answer).toEqual(await store.jobs.byId(job.id));
        expect(answer.status).toBe('cancelled');
        expect(JSON.parse(answer.request).prompt).toHaveLength(100_000);
      });

      it('a request whose wait runs out is answered the whole row as it stands', async () => {
        const job = await submit(longPrompt);
        const started = Date.now();
        const answer = await jobs.waitForTerminal(job.id, 150);
        expect(Date.now() - started).toBeGreaterThanOrEqual(140);
        expect(answer).toEqual(await store.jobs.byId(job.id));
        expect(answer.status).toBe('queued');
        expect(JSON.parse(answer.request).prompt).toHaveLength(100_000);
      });

      it('a request waiting for a job deleted meanwhile is answered 410, not a row that is not there', async () => {
        const job = await submit(longPrompt);
        await endInStore(job.id);
        await store.retention.deleteJobs([job.id]);
        expect(await store.jobs.byId(job.id)).toBeUndefined();
        await expect(jobs.waitForTerminal(job.id, 10_000)).rejects.toMatchObject({
          code: 'job-expired',
          status: 410,
        });
      });
    });
  });
}
