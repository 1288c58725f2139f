import type { SqlExecutor } from '../driver.js';

const list = (n: number) => Array.from({ length: n }, () => '?').join(', ');

/**
 * What the purge deletes (src/retention/): jobs past retention with everything that points at
 * them, idempotency records and finished webhook deliveries past theirs. Each call takes one
 * bounded batch; callers loop while a batch comes back full.
 */
export class RetentionRepository {
  constructor(private readonly db: SqlExecutor) {}

  /**
   * Up to `limit` jobs whose retention ended before `now`, oldest first; a job whose webhook is
   * still being delivered waits for its delivery to end.
   */
  async expired(now: number, limit: number): Promise<Array<{ id: string; org_id: string }>> {
    return this.db.all(
      `SELECT id, org_id FROM jobs
       WHERE expires_at IS NOT NULL AND expires_at < ?
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.job_id = jobs.id AND d.status = 'pending')
       ORDER BY expires_at LIMIT ?`,
      [now, limit],
    );
  }

  /**
   * Dates the expiry of the next `limit` terminal jobs by id after `after` to `retentionMs` after
   * their end, where an earlier `jobs.retention` dated it otherwise. A deleted job, expired as of its
   * end, is left so. Answers how many changed and the last id looked at (none: no more jobs).
   */
  async redate(
    retentionMs: number,
    after: string,
    limit: number,
  ): Promise<{ changed: number; last: string | undefined }> {
    const ids = (
      await this.db.all<{ id: string }>(
        'SELECT id FROM jobs WHERE id > ? AND expires_at IS NOT NULL ORDER BY id LIMIT ?',
        [after, limit],
      )
    ).map((row) => row.id);
    if (ids.length === 0) return { changed: 0, last: undefined };
    const changed = await this.db.run(
      `UPDATE jobs SET expires_at = finished_at + ?
       WHERE id IN (${list(ids.length)}) AND expires_at > finished_at AND expires_at <> finished_at + ?`,
      [retentionMs, ...ids, retentionMs],
    );
    return { changed, last: ids[ids.length - 1] };
  }

  /**
   * Deletes the jobs and the rows that point at them. Their usage-ledger rows stay, and so do their
   * idempotency keys until their day is over: a retry then is told the job expired, and not run
   * again. Answers how many jobs.
   */
  async deleteJobs(ids: string[]): Promise<number> {
    if (ids.length === 0) return 0;
    const where = `job_id IN (${list(ids.length)})`;
    await this.db.run(`DELETE FROM webhook_deliveries WHERE ${where} AND status <> 'pending'`, ids);
    await this.db.run(`DELETE FROM response_events WHERE ${where}`, ids);
    return this.db.run(
      `DELETE FROM jobs WHERE id IN (${list(ids.length)})
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.job_id = jobs.id)`,
      ids,
    );
  }

  /** Deletes up to `limit` idempotency records made before `before`. */
  async pruneIdempotency(before: number, limit: number): Promise<number> {
    return this.db.run(
      `DELETE FROM idempotency_keys WHERE (org_id, idem_key) IN
         (SELECT org_id, idem_key FROM idempotency_keys WHERE created_at < ? LIMIT ?)`,
      [before, limit],
    );
  }

  /** Deletes up to `limit` delivered or abandoned webhook deliveries made before `before`. */
  async pruneDeliveries(before: number, limit: number): Promise<number> {
    return this.db.run(
      `DELETE FROM webhook_deliveries WHERE id IN
         (SELECT id FROM webhook_deliveries WHERE created_at < ? AND status <> 'pending' LIMIT ?)`,
      [before, limit],
    );
  }
}
