import { issueKey } from '../../src/auth/keys.js';
import { uuidv7 } from '../../src/ids.js';
import { type JobKind, KindRegistry } from '../../src/jobs/kinds.js';
import { JobService } from '../../src/jobs/service.js';
import type { ApiKey, Store } from '../../src/store/index.js';
import { freshStore, type StoreCase } from './stores.js';

/**
 * Inserts an async job of `kind` straight into the store, as the gateway would have; `running`
 * leases it to worker `w1` for a minute, as in its first run. Answers the job's id.
 */
export async function insertJob(
  store: Store,
  orgId: string,
  { kind, running }: { kind: string; running: boolean },
): Promise<string> {
  const now = Date.now();
  const id = uuidv7(now);
  await store.jobs.insert({
    id,
    org_id: orgId,
    key_id: 'key_test',
    kind,
    mode: 'async',
    request: '{}',
    max_attempts: 3,
    queue_deadline: now + 60_000,
    run_limit_ms: 60_000,
    created_at: now,
    webhook_url: null,
    webhook_secret: null,
    ...(running ? { lease: { owner: 'w1', until: now + 60_000 } } : {}),
  });
  return id;
}

/**
 * A fresh, migrated store of `storeCase` with an organisation `acme` and a key of it (`caller`),
 * and a started JobService for `kinds`. `close` stops the service and removes the store.
 */
export async function jobsOnFreshStore(
  storeCase: StoreCase,
  kinds: JobKind[],
  maxAttempts = 3,
): Promise<{ store: Store; jobs: JobService; orgId: string; caller: ApiKey; close(): Promise<void> }> {
  const fresh = await freshStore(storeCase);
  const orgId = (await fresh.store.orgs.create('acme'))?.id as string;
  const caller = (await issueKey(fresh.store, { orgId })).record;
  const jobs = new JobService(fresh.store, new KindRegistry(kinds), { retentionMs: 60_000, maxAttempts });
  await jobs.start();
  return {
    store: fresh.store,
    jobs,
    orgId,
    caller,
    close: async () => {
      await jobs.stop();
      await fresh.close();
    },
  };
}
