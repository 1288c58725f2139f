import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/index.js';
import { migrate } from '../../src/store/migrations.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Migration 10 rebuilds SQLite's jobs and webhook_deliveries tables so that their status checks cost
 * no temporary table; PostgreSQL keeps its tables. Either way, a store upgraded with rows in it keeps
 * every row and reference, and still refuses a status outside the list.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`status checks, migrated from version 9: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      const fresh = storeCase.fresh();
      cleanup = fresh.cleanup;
      store = openStore(fresh.store);
      await migrate(store.driver, 9);
      const org = await store.orgs.create('acme');
      const now = Date.now();
      for (const [i, status] of ['queued', 'running', 'completed', 'failed'].entries()) {
        await store.driver.run(
          `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, result, max_attempts, queue_deadline,
             run_limit_ms, created_at, meta, metered, traceparent)
           VALUES (?, ?, 'key_1', 'chat', 'async', ?, ?, ?, 3, ?, 60000, ?, ?, ?, ?)`,
          [
            `job_${i}`,
            org?.id,
            status,
            `{"n":${i}}`,
            status === 'completed' ? '{"ok":true}' : null,
            now + 1000,
            now + i,
            i === 2 ? '{"route":"local"}' : null,
            i % 2,
            i === 1 ? '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' : null,
          ],
        );
      }
      await store.driver.run(
        `INSERT INTO webhook_deliveries (id, job_id, org_id, url, event, body, status, next_attempt_at, created_at)
         VALUES ('whd_1', 'job_2', ?, 'https://hooks.example/kiln', 'job.completed', '{}', 'pending', ?, ?)`,
        [org?.id, now, now],
      );
      await store.driver.run(
        `INSERT INTO usage_ledger (job_id, org_id, key_id, kind, status, run_ms, input_units, output_units, created_at)
         VALUES ('job_2', ?, 'key_1', 'chat', 'completed', 12, 3, 4, ?)`,
        [org?.id, now],
      );
      await store.driver.run("INSERT INTO response_events (job_id, seq, data) VALUES ('job_1', 1, 'event')");
      await store.driver.run(
        "INSERT INTO idempotency_keys (org_id, idem_key, request_hash, job_id, created_at) VALUES (?, 'k', 'h', 'job_0', ?)",
        [org?.id, now],
      );
    });
    afterEach(async () => {
      await store.close();
      await cleanup();
    });

    const everything = async () => ({
      jobs: await store.driver.all('SELECT * FROM jobs ORDER BY id'),
      deliveries: await store.driver.all('SELECT * FROM webhook_deliveries ORDER BY id'),
      ledger: await store.driver.all('SELECT * FROM usage_ledger ORDER BY job_id'),
      events: await store.driver.all('SELECT * FROM response_events ORDER BY job_id, seq'),
      keys: await store.driver.all('SELECT * FROM idempotency_keys ORDER BY idem_key'),
    });

    it('keeps every row and reference, and still refuses a status outside the list', async () => {
      const before = await everything();
      expect(before.jobs).toHaveLength(4);
      expect(await migrate(store.driver, 10)).toBe(1);
      expect(await everything()).toEqual(before);

      // The rebuilt tables are the ones referenced, and references are enforced again.
      await expect(
        store.driver.run(
          "INSERT INTO response_events (job_id, seq, data) VALUES ('job_missing', 1, 'event')",
        ),
      ).rejects.toThrow();
      await expect(
        store.driver.run(
          `INSERT INTO webhook_deliveries (id, job_id, org_id, url, event, body, status, next_attempt_at, created_at)
           VALUES ('whd_2', 'job_missing', ?, 'https://hooks.example/kiln', 'job.completed', '{}', 'pending', 1, 1)`,
          [before.jobs[0] && (before.jobs[0] as { org_id: string }).org_id],
        ),
      ).rejects.toThrow();

      await expect(store.driver.run("UPDATE jobs SET status = 'paused' WHERE id = 'job_0'")).rejects.toThrow(
        /check/i,
      );
      await expect(
        store.driver.run("UPDATE webhook_deliveries SET status = 'lost' WHERE id = 'whd_1'"),
      ).rejects.toThrow(/check/i);
      expect(await store.driver.run("UPDATE jobs SET status = 'cancelled' WHERE id = 'job_0'")).toBe(1);
      expect(await store.driver.run("UPDATE webhook_deliveries SET status = 'gone' WHERE id = 'whd_1'")).toBe(
        1,
      );
      expect(await everything()).not.toEqual(before);
    });

    if (storeCase.name === 'sqlite')
      it('SQLite writes a job without building a temporary table, with foreign keys on again', async () => {
        const opcodes = async (sql: string) =>
          (await store.driver.all<{ opcode: string }>(`EXPLAIN ${sql}`)).map((op) => op.opcode);
        const insert =
          "INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, max_attempts, queue_deadline, run_limit_ms, created_at) VALUES ('j', 'o', 'k', 'chat', 'sync', 'running', '{}', 1, 1, 1, 1)";
        const end = "UPDATE jobs SET status = 'completed' WHERE id = 'j' AND status = 'running'";
        expect(await opcodes(insert)).toContain('OpenEphemeral');
        await store.migrate();
        expect(await opcodes(insert)).not.toContain('OpenEphemeral');
        expect(await opcodes(end)).not.toContain('OpenEphemeral');
        expect(await store.driver.get('PRAGMA foreign_keys')).toEqual({ foreign_keys: 1 });
      });
  });
}
