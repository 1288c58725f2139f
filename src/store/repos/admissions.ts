import type { SqlExecutor } from '../driver.js';

/** Whose admissions: a key's or an organisation's. */
export type Scope = 'key' | 'org';
const COLUMN: Record<Scope, string> = { key: 'key_id', org: 'org_id' };

export interface Admission {
  job_id: string;
  key_id: string;
  org_id: string;
  created_at: number;
  /** Reserved while the job is held (queued or running); what it really used once it ended. */
  tokens: number;
  media_ms: number;
  /** 1 while the job is queued or running. */
  held: number;
}

const numbers = (row: Record<string, unknown>): Admission =>
  ({
    ...row,
    created_at: Number(row.created_at),
    tokens: Number(row.tokens),
    media_ms: Number(row.media_ms),
    held: Number(row.held),
  }) as Admission;

/**
 * The admissions of limited callers' jobs: rates count them over the last minute, budgets sum them
 * over the day or month, and `concurrent` counts those still held.
 */
export class AdmissionRepository {
  constructor(
    private readonly db: SqlExecutor,
    private readonly scopeLock: string | undefined,
  ) {}

  /**
   * Holds, until the transaction ends, the right to admit work for this caller: other gateways'
   * admissions for it wait. (SQLite's writers are serial already.)
   */
  async lock(scope: Scope, id: string): Promise<void> {
    if (this.scopeLock) await this.db.get(this.scopeLock, [`${scope}:${id}`]);
  }

  async insert(row: Admission): Promise<void> {
    await this.db.run(
      'INSERT INTO admissions (job_id, key_id, org_id, created_at, tokens, media_ms, held) VALUES (?, ?, ?, ?, ?, ?, ?)',
      [row.job_id, row.key_id, row.org_id, row.created_at, row.tokens, row.media_ms, row.held],
    );
  }

  /** Jobs of the scope still queued or running. */
  async heldCount(scope: Scope, id: string): Promise<number> {
    const row = await this.db.get<{ n: number | string }>(
      `SELECT COUNT(*) AS n FROM admissions WHERE ${COLUMN[scope]} = ? AND held = 1`,
      [id],
    );
    return Number(row?.n ?? 0);
  }

  /** The scope's admissions since `since` (exclusive), oldest first: the minute window. */
  async since(
    scope: Scope,
    id: string,
    since: number,
  ): Promise<Array<{ created_at: number; tokens: number }>> {
    const rows = await this.db.all<{ created_at: number | string; tokens: number | string }>(
      `SELECT created_at, tokens FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at > ? ORDER BY created_at`,
      [id, since],
    );
    return rows.map((r) => ({ created_at: Number(r.created_at), tokens: Number(r.tokens) }));
  }

  /** Tokens and media since the start of the day, and tokens since the start of the month. */
  async totals(
    scope: Scope,
    id: string,
    periods: { day: number; month: number },
  ): Promise<{ day_tokens: number; day_media_ms: number; month_tokens: number }> {
    const from = Math.min(periods.day, periods.month);
    const row = await this.db.get<Record<string, number | string | null>>(
      `SELECT SUM(CASE WHEN created_at >= ? THEN tokens ELSE 0 END) AS day_tokens,
         SUM(CASE WHEN created_at >= ? THEN media_ms ELSE 0 END) AS day_media_ms,
         SUM(CASE WHEN created_at >= ? THEN tokens ELSE 0 END) AS month_tokens
       FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at >= ?`,
      [periods.day, periods.day, periods.month, id, from],
    );
    return {
      day_tokens: Number(row?.day_tokens ?? 0),
      day_media_ms: Number(row?.day_media_ms ?? 0),
      month_tokens: Number(row?.month_tokens ?? 0),
    };
  }

  /** Replaces a held job's reservation by what it used; false when it was settled already (or never admitted). */
  async settle(jobId: string, used: { tokens: number; media_ms: number }): Promise<boolean> {
    const changed = await this.db.run(
      'UPDATE admissions SET held = 0, tokens = ?, media_ms = ? WHERE job_id = ? AND held = 1',
      [used.tokens, used.media_ms, jobId],
    );
    return changed > 0;
  }

  async get(jobId: string): Promise<Admission | undefined> {
    const row = await this.db.get<Record<string, unknown>>('SELECT * FROM admissions WHERE job_id = ?', [
      jobId,
    ]);
    return row ? numbers(row) : undefined;
  }

  /** Deletes up to `limit` settled admissions older than `before` (past every window); answers how many. */
  async prune(before: number, limit: number): Promise<number> {
    return this.db.run(
      `DELETE FROM admissions WHERE job_id IN (
         SELECT job_id FROM admissions WHERE created_at < ? AND held = 0 LIMIT ?)`,
      [before, limit],
    );
  }
}
