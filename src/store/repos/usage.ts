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

  /**
   * The kind of the organisation's job `jobId` as its ledger row records it: the row outlives the
   * job's own, so a job that ended and was purged since is still known to have existed.
   */
  async kindOfJob(orgId: string, jobId: string): Promise<string | undefined> {
    const row = await this.db.get<{ kind: string }>(
      'SELECT kind FROM usage_ledger WHERE job_id = ? AND org_id = ?',
      [jobId, orgId],
    );
    return row?.kind;
  }

  async countForJob(jobId: string): Promise<number> {
    const row = await this.db.get<{ n: number | string }>(
      'SELECT COUNT(*) AS n FROM usage_ledger WHERE job_id = ?',
      [jobId],
    );
    return Number(row?.n ?? 0);
  }

  /** Sums per UTC day, kind and key for the organisation, over [since, until); oldest day first. */
  async daily(orgId: string, since: number, until: number): Promise<DailyUsage[]> {
    const rows = await this.db.all<Record<keyof DailyUsage, string | number>>(
      `SELECT created_at / ${DAY_MS} AS day, kind, key_id, COUNT(*) AS jobs,
         SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS completed,
         SUM(run_ms) AS run_ms, SUM(input_units) AS input_units, SUM(output_units) AS output_units
       FROM usage_ledger WHERE org_id = ? AND created_at >= ? AND created_at < ?
       GROUP BY created_at / ${DAY_MS}, kind, key_id ORDER BY day, kind, key_id`,
      [orgId, since, until],
    );
    return rows.map((r) => ({
      day: new Date(Number(r.day) * DAY_MS).toISOString().slice(0, 10),
      kind: String(r.kind),
      key_id: String(r.key_id),
      jobs: Number(r.jobs),
      completed: Number(r.completed),
      run_ms: Number(r.run_ms),
      input_units: Number(r.input_units),
      output_units: Number(r.output_units),
    }));
  }
}

const DAY_MS = 86_400_000;

/** One UTC day's use by one key of one kind. */
export interface DailyUsage {
  /** YYYY-MM-DD, UTC. */
  day: string;
  kind: string;
  key_id: string;
  jobs: number;
  completed: number;
  run_ms: number;
  input_units: number;
  output_units: number;
}
