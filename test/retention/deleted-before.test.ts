import { describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/ids.js';
import { openStore } from '../../src/store/index.js';
import { migrate } from '../../src/store/migrations.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Migration 11: a job deleted before it (its request emptied to '{}', expired as of its deletion)
 * expires as of its end, as deletion now dates it, so that a change of `jobs.retention` re-dating
 * terminal jobs leaves it expired. A job not deleted keeps its expiry.
 */
describe.each(storeCases)('jobs deleted before migration 11: $name', (c) => {
  it.skipIf(c.skip)(`${caseTitle(c)}: expire as of their end; the others keep their expiry`, async () => {
    const { store: config, cleanup } = c.fresh();
    const store = openStore(config);
    try {
      await migrate(store.driver, 10);
      await store.orgs.create('acme');
      const orgId = (await store.orgs.byName('acme'))?.id as string;
      const finishedAt = Date.now() - 60_000;
      const [deleted, kept] = [uuidv7(), uuidv7()];
      for (const [id, request, expiresAt] of [
        [deleted, '{}', finishedAt + 30_000],
        [kept, '{"model":"m"}', finishedAt + 86_400_000],
      ] as const)
        await store.driver.run(
          `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, max_attempts,
             queue_deadline, run_limit_ms, created_at, finished_at, expires_at)
           VALUES (?, ?, 'key', 'chat.completion', 'async', 'completed', ?, 1, ?, 1000, ?, ?, ?)`,
          [id, orgId, request, finishedAt, finishedAt - 1000, finishedAt, expiresAt],
        );
      await store.migrate();
      expect((await store.jobs.byId(deleted))?.expires_at).toBe(finishedAt);
      expect((await store.jobs.byId(kept))?.expires_at).toBe(finishedAt + 86_400_000);
    } finally {
      await store.close();
      await cleanup();
    }
  });
});
