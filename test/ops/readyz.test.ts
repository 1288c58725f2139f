import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { READY_TIMEOUT_MS } from '../../src/api/health.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * /readyz answers within a bound whatever the store does: a store that takes the connection but
 * never answers (a PostgreSQL server stuck, or partitioned away) is 503 store-unavailable, not a
 * probe left hanging until the orchestrator's own timeout counts it as nothing.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`readiness when the store stops answering: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    beforeAll(async () => {
      kiln = await startTestServer(storeCase);
    });
    afterAll(async () => kiln?.close());

    it('is ready while the store answers, and 503 within the bound once it hangs', async () => {
      expect((await kiln.call('GET', '/readyz')).body).toEqual({ status: 'ready', store: storeCase.name });
      const { store } = kiln.server;
      const ping = store.ping.bind(store);
      // The store's next answers never come.
      store.ping = () => new Promise<void>(() => undefined);
      try {
        const started = Date.now();
        const answer = await kiln.call('GET', '/readyz');
        expect(answer.status).toBe(503);
        expect(answer.body.error).toMatchObject({
          code: 'store-unavailable',
          message: `the store did not answer within ${READY_TIMEOUT_MS} ms`,
        });
        // Bounded: the probe's answer comes with the bound, not at the connection's timeout.
        expect(Date.now() - started).toBeLessThan(READY_TIMEOUT_MS + 5_000);
      } finally {
        store.ping = ping;
      }
      expect((await kiln.call('GET', '/readyz')).status).toBe(200);
    });
  });
}
