import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * A job deleted by its owner, or past its retention, is gone: its poll answers 410, and the listing
 * agrees — it shows neither the job nor what it held, although the purge removes the row later.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`listing leaves out jobs that are gone: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;

    beforeAll(async () => {
      const kind = sleepKind();
      kiln = await startTestServer(
        storeCase,
        { 'jobs.retention': '2s', 'jobs.purge_interval': '1h' },
        { kinds: [kind], routes: sleepRoutes(kind) },
      );
    });
    afterAll(async () => kiln?.close());

    const listed = async (query = '') =>
      ((await kiln.call('GET', `/v1/jobs${query}`)).body.data as Array<{ id: string; message?: string }>).map(
        (job) => job.id,
      );

    it('a deleted job and an expired one are 410 and unlisted; the others stay listed', async () => {
      const failed = await kiln.call('POST', '/v1/test/sleep', {
        body: { ms: 1, mode: 'sync', fail: 'the prompt, echoed by the engine' },
      });
      const failedId = failed.body.job.id as string;
      // A sync answer is the result itself: the job's id is the newest listed.
      expect((await kiln.call('POST', '/v1/test/sleep', { body: { ms: 1, mode: 'sync' } })).status).toBe(200);
      const [expiring, alsoFailed] = await listed();
      expect(alsoFailed).toBe(failedId);

      expect((await kiln.call('DELETE', `/v1/jobs/${failedId}`)).status).toBe(200);
      expect((await kiln.call('GET', `/v1/jobs/${failedId}`)).status).toBe(410);
      expect(await listed()).not.toContain(failedId);
      expect(await listed('?status=failed')).not.toContain(failedId);
      const row = await kiln.server.store.jobs.byId(failedId.replace(/^test-/, ''));
      expect(row).toMatchObject({ status: 'failed', request: '{}', result: null, error_message: null });

      // Past the retention of 2 s, before any purge.
      await sleep(2200);
      expect((await kiln.call('GET', `/v1/jobs/${expiring}`)).status).toBe(410);
      expect(await listed('?status=completed')).not.toContain(expiring);
      // A job within its retention is listed as ever.
      expect((await kiln.call('POST', '/v1/test/sleep', { body: { ms: 1, mode: 'sync' } })).status).toBe(200);
      expect(await listed()).toHaveLength(1);
      expect(await listed()).not.toContain(expiring);
    });
  });
}
