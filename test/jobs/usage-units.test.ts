import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_JOB_UNITS } from '../../src/jobs/kinds.js';
import type { JobService } from '../../src/jobs/service.js';
import type { ApiKey, JobOutcome, Store } from '../../src/store/index.js';
import { sleepKind } from '../fixtures/sleep-kind.js';
import { jobsOnFreshStore } from '../helpers/jobs.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * An engine reports its own usage figures, and an OpenAI-compatible one may report anything. Whatever
 * they are, a finished job is recorded finished, once, with the same whole units on either store —
 * on PostgreSQL a fraction or a figure past BIGINT used to fail the job's end, so the worker ran the
 * job again and again, paying the engine each time.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`usage units as engines report them: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let jobs: JobService;
    let orgId: string;
    let caller: ApiKey;
    const kind = sleepKind();

    beforeEach(async () => {
      ({ store, jobs, orgId, caller, close } = await jobsOnFreshStore(storeCase, [kind]));
    });
    afterEach(async () => close());

    const reported: Array<[JobOutcome['usage'], { input_units: number; output_units: number }]> = [
      [
        { inputUnits: 1.5, outputUnits: 2.4 },
        { input_units: 2, output_units: 2 },
      ],
      [
        { inputUnits: 1e19, outputUnits: Number.POSITIVE_INFINITY },
        { input_units: MAX_JOB_UNITS, output_units: MAX_JOB_UNITS },
      ],
      [
        { inputUnits: -3, outputUnits: Number.NaN },
        { input_units: 0, output_units: 0 },
      ],
      [
        { inputUnits: '12' as unknown as number, outputUnits: 7 },
        { input_units: 0, output_units: 7 },
      ],
      [
        { inputUnits: 40, outputUnits: 2 },
        { input_units: 40, output_units: 2 },
      ],
    ];

    it.each([
      ['its worker holding the row (the end batched with others on PostgreSQL)', true],
      ['the row read back', false],
    ])('a job ends completed with whole units, %s', async (_how, withRow) => {
      for (const [usage, units] of reported) {
        const { job } = await jobs.submit({ kind: kind as never, mode: 'async', caller, request: { ms: 1 } });
        const held = await store.jobs.claimNext('w1', [kind.name], Date.now(), Date.now() + 60_000);
        expect(held?.id).toBe(job.id);
        const ended = await jobs.finish(
          job.id,
          { by: 'worker', owner: 'w1', attempt: 1 },
          { status: 'completed', result: 'ok', usage },
          false,
          withRow ? held : undefined,
        );
        expect(ended?.status).toBe('completed');
        expect((await store.jobs.byId(job.id))?.status).toBe('completed');
        const rows = await store.driver.all<{ input_units: number | string; output_units: number | string }>(
          'SELECT input_units, output_units FROM usage_ledger WHERE job_id = ?',
          [job.id],
        );
        expect(
          rows.map((r) => ({ input_units: Number(r.input_units), output_units: Number(r.output_units) })),
        ).toEqual([units]);
      }
      // The organisation's usage sums them without overflowing either store.
      const [summary] = await store.usage.summary(orgId, 0, Date.now() + 1000);
      expect(summary).toMatchObject({
        jobs: reported.length,
        completed: reported.length,
        input_units: reported.reduce((sum, [, u]) => sum + u.input_units, 0),
        output_units: reported.reduce((sum, [, u]) => sum + u.output_units, 0),
      });
    });
  });
}
