import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { JobKind } from '../../src/jobs/kinds.js';
import type { JobService } from '../../src/jobs/service.js';
import { Worker } from '../../src/jobs/worker.js';
import type { ApiKey } from '../../src/store/index.js';
import { jobsOnFreshStore } from '../helpers/jobs.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** A job's progress, as a poll shows it while the job runs, is the same figure on either store. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`progress while a job runs: ${caseTitle(storeCase)}`, () => {
    let close: () => Promise<void>;
    let jobs: JobService;
    let worker: Worker;
    let caller: ApiKey;
    /** Each report the handler makes, in turn; it then waits until `release` is called. */
    let reports: number[] = [];
    let reported: () => void = () => undefined;
    let release: () => void = () => undefined;
    const kind: JobKind<Record<string, never>> = {
      name: 'test.progress',
      idPrefix: 'test-',
      submissionObject: 'test.progress.async',
      pollingBase: '/v1/jobs/',
      queueTtlMs: 60_000,
      runLimitMs: 60_000,
      async run(job) {
        for (const fraction of reports) await job.progress(fraction);
        const released = new Promise<void>((resolve) => {
          release = resolve;
        });
        reported();
        await released;
        return { result: 'done' };
      },
    };

    beforeEach(async () => {
      ({ jobs, caller, close } = await jobsOnFreshStore(storeCase, [kind as JobKind]));
      worker = new Worker(
        jobs,
        { concurrency: 1, leaseMs: 30_000, pollIntervalMs: 20 },
        pino({ level: 'silent' }),
      );
      await worker.start();
    });
    afterEach(async () => {
      release();
      await worker.stop();
      await close();
    });

    it.each([
      [[1 / 3], 0.3333],
      [[2 / 3], 0.6667],
      [[0.25, Number.NaN], 0.25],
      [[0.5, Number.POSITIVE_INFINITY], 0.5],
      [[-2], 0],
      [[7], 1],
    ])('after reports %j, a poll shows %d', async (made, shown) => {
      reports = made;
      const running = new Promise<void>((resolve) => {
        reported = resolve;
      });
      const { job } = await jobs.submit({ kind: kind as never, mode: 'async', caller, request: {} });
      await running;
      const polled = jobs.poll(await jobs.get(caller.org_id, job.id));
      expect(polled).toMatchObject({ status: 'running', progress: shown });
      release();
      expect((await jobs.waitForTerminal(job.id, 5000)).status).toBe('completed');
    });
  });
}
