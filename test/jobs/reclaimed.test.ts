import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { JobService } from '../../src/jobs/service.js';
import { Sweeper } from '../../src/jobs/sweeper.js';
import { Worker } from '../../src/jobs/worker.js';
import type { ApiKey, JobRow, Store } from '../../src/store/index.js';
import { sleepKind } from '../fixtures/sleep-kind.js';
import { jobsOnFreshStore } from '../helpers/jobs.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * A worker whose lease on a job lapsed (its renewals failed while the store was unreachable) may
 * claim the same job again once the sweeper has requeued it. Only the new run may go on: the stale
 * one stops, is never mistaken for the new one, and never answers for it.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(
    `a job reclaimed by the worker that lost it: ${caseTitle(storeCase)}`,
    () => {
      let store: Store;
      let close: () => Promise<void>;
      let jobs: JobService;
      let caller: ApiKey;
      let sideEffects: string;
      const log = pino({ level: 'silent' });

      beforeEach(async () => {
        sideEffects = path.join(mkdtempSync(path.join(tmpdir(), 'kiln-reclaimed-')), 'runs.log');
        writeFileSync(sideEffects, '');
        ({ store, jobs, caller, close } = await jobsOnFreshStore(storeCase, [sleepKind({ sideEffects })], 5));
      });
      afterEach(async () => close());

      const submit = async (ms: number) =>
        (await jobs.submit({ kind: sleepKind() as never, mode: 'async', caller, request: { ms } })).job;
      /** `start` and `end` lines of the runs, as attempts. */
      const runs = (id: string) => {
        const lines = readFileSync(sideEffects, 'utf8').trim().split('\n').filter(Boolean);
        const of = (what: string) =>
          lines.filter((l) => l.startsWith(`${what} ${id} `)).map((l) => Number(l.split(' ')[2]));
        return { starts: of('start'), ends: of('end') };
      };

      it('the stale run stops when the same worker claims the job again, and only the new run ends', async () => {
        // The store is unreachable for renewals for 700 ms, more than two leases of 300 ms.
        const failUntil = Date.now() + 700;
        const renew = store.jobs.renewLeases.bind(store.jobs);
        store.jobs.renewLeases = async (...args) => {
          if (Date.now() < failUntil) throw new Error('the store is unreachable');
          return renew(...args);
        };
        const worker = new Worker(jobs, { concurrency: 2, leaseMs: 300, pollIntervalMs: 50 }, log);
        const sweeper = new Sweeper(jobs, 50, log);
        const job = await submit(1500);
        await worker.start();
        sweeper.start();
        try {
          const final = await jobs.waitForTerminal(job.id, 15_000);
          expect(final.status).toBe('completed');
          expect(final.attempts).toBeGreaterThan(1);
          const { starts, ends } = runs(job.id);
          expect(starts).toEqual(Array.from({ length: final.attempts }, (_, i) => i + 1));
          // Every earlier run was stopped: none of them slept to its end.
          expect(ends).toEqual([final.attempts]);
          expect(JSON.parse(final.result as string)).toEqual({ slept: 1500, attempt: final.attempts });
        } finally {
          sweeper.stop();
          await worker.stop();
        }
      });

      it('a renewal answered after the job was claimed again stops the stale run, not the current one', async () => {
        const worker = new Worker(jobs, { concurrency: 2, leaseMs: 600, pollIntervalMs: 20 }, log);
        const sweeper = new Sweeper(jobs, 100, log);
        const renew = store.jobs.renewLeases.bind(store.jobs);
        let first = true;
        store.jobs.renewLeases = async (owner, asked, until) => {
          if (!first) return renew(owner, asked, until);
          first = false;
          // While this renewal is on its way, the lease lapses and this worker claims the job again.
          const id = asked[0]?.id as string;
          await store.driver.run('UPDATE jobs SET lease_expires_at = 0 WHERE id = ?', [id]);
          await store.jobs.requeueLost(Date.now());
          await store.driver.notify('kiln_jobs', 'test.sleep');
          const deadline = Date.now() + 5000;
          while ((await store.jobs.byId(id))?.attempts !== 2 && Date.now() < deadline)
            await new Promise((resolve) => setTimeout(resolve, 5));
          return renew(owner, asked, until);
        };
        const job = await submit(1200);
        await worker.start();
        sweeper.start();
        try {
          const final = await jobs.waitForTerminal(job.id, 15_000);
          expect(first).toBe(false);
          expect({ status: final.status, attempts: final.attempts }).toEqual({
            status: 'completed',
            attempts: 2,
          });
          expect(runs(job.id)).toEqual({ starts: [1, 2], ends: [2] });
        } finally {
          sweeper.stop();
          await worker.stop();
        }
      });

      it("a stale run and the current one ending together: only the current one's end counts", async () => {
        const job = await submit(1);
        const claim = (leaseUntil: number) =>
          store.jobs.claimNext('w1', ['test.sleep'], Date.now(), leaseUntil) as Promise<JobRow>;
        const stale = await claim(Date.now() - 1);
        await new Sweeper(jobs, 60_000, log).sweep();
        const current = await claim(Date.now() + 60_000);
        expect([stale.attempts, current.attempts]).toEqual([1, 2]);
        const told: unknown[] = [];
        const off = jobs.events.on(job.id, (event) => {
          if (event.t === 'done') told.push(event.job?.result);
        });
        const end = (run: JobRow, result: string) =>
          jobs.finish(
            job.id,
            { by: 'worker', owner: 'w1', attempt: run.attempts },
            { status: 'completed', result },
            true,
            run,
          );
        // In one turn: on PostgreSQL the two ends go in one statement.
        const [staleEnd, currentEnd] = await Promise.all([end(stale, 'stale'), end(current, 'current')]);
        off();
        expect(staleEnd).toBeUndefined();
        expect(currentEnd).toMatchObject({ status: 'completed', attempts: 2, result: '"current"' });
        expect(told).toEqual(['"current"']);
        expect((await store.jobs.byId(job.id))?.result).toBe('"current"');
        expect(await store.usage.countForJob(job.id)).toBe(1);
      });
    },
  );
}
