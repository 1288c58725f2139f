import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createOutboundPolicy } from '../../src/net/policy.js';
import type { Store } from '../../src/store/index.js';
import { WebhookDeliverer } from '../../src/webhooks/deliverer.js';
import { insertJob } from '../helpers/jobs.js';
import { waitUntil } from '../helpers/process.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

/**
 * A delivery another process holds — in flight there, or leased by a process that crashed — waits
 * for that lease. The deliverers of every other process sleep until it lapses rather than ask the
 * outbox again every 10 ms (about 90 claims and 90 reads a second, each claim a write transaction
 * on SQLite), and one of them delivers it once it has.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a delivery leased by another process: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let receiver: Server;
    let url: string;
    const received: string[] = [];

    beforeEach(async () => {
      ({ store, close } = await freshStore(storeCase));
      receiver = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          received.push(String(req.headers['webhook-id'] ?? req.url));
          res.writeHead(204).end();
        });
      });
      await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
      url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    });
    afterEach(async () => {
      await new Promise((resolve) => receiver.close(resolve));
      await close();
    });

    it('is claimed after the lease lapses, with no hot loop on the outbox meanwhile', async () => {
      const org = await store.orgs.create('acme');
      const jobId = await insertJob(store, org?.id as string, { kind: 'test.sleep', running: false });
      await store.driver.run('UPDATE jobs SET webhook_url = ?, webhook_secret = ? WHERE id = ?', [
        url,
        'whsec_test_secret_0123456789',
        jobId,
      ]);
      const now = Date.now();
      await store.webhooks.enqueue({
        jobId,
        orgId: org?.id as string,
        url,
        event: 'job.completed',
        body: '{}',
        now,
      });
      // The process that claimed it died a moment later: its lease runs 1.5 s more.
      const leaseEnds = now + 1500;
      await store.driver.run('UPDATE webhook_deliveries SET lease_owner = ?, lease_expires_at = ?', [
        'webhooks:crashed',
        leaseEnds,
      ]);

      let claims = 0;
      const claimDue = store.webhooks.claimDue.bind(store.webhooks);
      store.webhooks.claimDue = (...args) => {
        claims++;
        return claimDue(...args);
      };
      const config = loadConfig({ env: {}, overrides: { 'security.allow_hosts': ['127.0.0.1'] } });
      const deliverer = new WebhookDeliverer(
        store,
        createOutboundPolicy(config.security),
        { retryScheduleMs: [60_000], timeoutMs: 1000, jitter: 0, pollIntervalMs: 1000 },
        pino({ level: 'silent' }),
      );
      await deliverer.start();
      try {
        // Delivered: the receiver answered and the attempt is recorded (a moment after the POST).
        await waitUntil(async () => (await store.webhooks.forJob(jobId))?.status === 'delivered', {
          timeoutMs: 10_000,
        });
        expect(Date.now()).toBeGreaterThan(leaseEnds);
        // One claim at the start, at most one a poll interval until the lease lapsed, one to deliver.
        expect(claims).toBeLessThanOrEqual(5);
        expect(received).toHaveLength(1);
      } finally {
        await deliverer.stop();
      }
    });
  });
}
