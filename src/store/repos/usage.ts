import type { SqlExecutor } from '../driver.js';
import type { UsageSummary } from '../types.js';

export class UsageRepository {
  constructor(private readonly db: SqlExecutor) {}

  /** Sums per kind for the organisation, over [since, until). */
  async summary(orgId: string, since: number, until: number): Promise<UsageSummary[]> {
    const rows = await this.db.all<Record<keyof UsageSummary, string | number>>(
      `SELECT kind, COUNT(*) AS jobs,
         SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed,
         SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed,
         SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
         SUM(CASE WHEN status = 'timeout' THEN 1 ELSE 0 END) AS timeout,
         SUM(run_ms) AS run_ms, SUM(input_units) AS input_units, SUM(output_units) AS output_units
       FROM usage_ledger WHERE org_id = ? AND created_at >= ? AND created_at < ?
       GROUP BY kind ORDER BY kind`,
      [orgId, since, until],
    );
    // COUNT and SUM come back as strings from PostgreSQL (numeric), as numbers from SQLite.
    return rows.map((r) => ({
      kind: String(r.kind),
      jobs: Number(r.jobs),
      completed: Number(r.completed),
      failed: Number(r.failed),
      cancelled: Number(r.cancelled),
      timeout: Number(r.timeout),
      run_ms: Number(r.run_ms),
      input_units: Number(r.input_units),
      output_units: Number(r.output_units),
    }));
  }

  async countForJob(jobId: string): Promise<number> {
    const row = await this.db.get<{ n: number | string }>(
      'SELECT COUNT(*) AS n FROM usage_ledger WHERE job_id = ?',
      [jobId],
    );
    return Number(row?.n ?? 0);
  }
}
