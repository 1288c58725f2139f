import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * A cancel reads the job, then ends it under a guard. Should a worker claim the job in between, the
 * job is cancelled all the same — and its handler, already running, must be stopped at once, not
 * at the worker's next lease renewal (up to 10 s later, the engine generating meanwhile).
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a cancel that races a claim: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    const sideEffects = path.join(tmpdir(), `kiln-cancel-claimed-${process.pid}-${storeCase.name}.log`);

    beforeAll(async () => {
      writeFileSync(sideEffects, '');
      const kind = sleepKind({ sideEffects });
      kiln = await startTestServer(
        storeCase,
        { 'jobs.workers': 1, 'jobs.lease_seconds': 30, 'jobs.poll_interval_ms': 50 },
        { kinds: [kind], routes: sleepRoutes(kind) },
      );
    });
    afterAll(async () => kiln?.close());

    it('stops the handler of a job claimed while the cancel was on its way', async () => {
      // The one worker is busy for 300 ms; the target waits in the queue behind it.
      await kiln.call('POST', '/v1/test/sleep', { body: { ms: 300 } });
      const target = (await kiln.call('POST', '/v1/test/sleep', { body: { ms: 3000 } })).body;
      const id = String(target.polling_url).split('/').pop() as string;
      // The cancel's read of the job answers queued, and returns only once the worker has claimed it.
      const jobs = kiln.server.store.jobs;
      const get = jobs.get.bind(jobs);
      jobs.get = async (orgId, jobId) => {
        const row = await get(orgId, jobId);
        if (jobId === id) {
          expect(row?.status).toBe('queued');
          for (let i = 0; i < 200 && (await jobs.statusOf(id)) !== 'running'; i++) await sleep(10);
        }
        return row;
      };
      const cancelled = await kiln.call('POST', `/v1/jobs/${id}/cancel`);
      jobs.get = get;
      expect(cancelled.body).toMatchObject({ status: 'cancelled', started_at: expect.any(Number) });
      // The handler was told at once: it never reaches its end, 3 s after its start.
      await sleep(3500);
      const lines = readFileSync(sideEffects, 'utf8')
        .split('\n')
        .filter((line) => line.includes(id));
      expect(lines.map((line) => line.split(' ')[0])).toEqual(['start']);
      expect((await kiln.call('GET', `/v1/jobs/${id}`)).body.status).toBe('cancelled');
    });
  });
}
