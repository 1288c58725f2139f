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

  /** Deletes the jobs and the rows that point at them (their usage-ledger rows stay). Answers how many jobs. */
  async deleteJobs(ids: string[]): Promise<number> {
    if (ids.length === 0) return 0;
    const where = `job_id IN (${list(ids.length)})`;
    await this.db.run(`DELETE FROM idempotency_keys WHERE ${where}`, ids);
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
