import type { SqlExecutor } from '../driver.js';

export interface IdempotencyRecord {
  request_hash: string;
  job_id: string;
  created_at: number;
}

export class IdempotencyRepository {
  constructor(private readonly db: SqlExecutor) {}

  /** The live record for the key: one older than `since` no longer counts. */
  async find(orgId: string, key: string, since: number): Promise<IdempotencyRecord | undefined> {
    return this.db.get<IdempotencyRecord>(
      'SELECT request_hash, job_id, created_at FROM idempotency_keys WHERE org_id = ? AND idem_key = ? AND created_at >= ?',
      [orgId, key, since],
    );
  }

  /** Frees the key that `jobId` was submitted with, if any: the same key may then make a new job. */
  async release(orgId: string, jobId: string): Promise<void> {
    await this.db.run('DELETE FROM idempotency_keys WHERE org_id = ? AND job_id = ?', [orgId, jobId]);
  }

  /**
   * Binds the key to the job, taking over a record older than `since`; answers false when a live
   * record already holds the key (a concurrent twin won).
   */
  async bind(
    orgId: string,
    key: string,
    requestHash: string,
    jobId: string,
    now: number,
    since: number,
  ): Promise<boolean> {
    const row = await this.db.get(
      `INSERT INTO idempotency_keys (org_id, idem_key, request_hash, job_id, created_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (org_id, idem_key) DO UPDATE SET request_hash = excluded.request_hash, job_id = excluded.job_id, created_at = excluded.created_at
       WHERE idempotency_keys.created_at < ?
       RETURNING job_id`,
      [orgId, key, requestHash, jobId, now, since],
    );
    return row !== undefined;
  }
}
