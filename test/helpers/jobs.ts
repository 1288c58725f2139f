import { uuidv7 } from '../../src/ids.js';
import type { Store } from '../../src/store/index.js';

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
