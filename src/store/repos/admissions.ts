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

  /** How many admissions the scope has since `since` (exclusive), their tokens, and the oldest's time. */
  async window(
    scope: Scope,
    id: string,
    since: number,
  ): Promise<{ count: number; tokens: number; oldest: number | null }> {
    const row = await this.db.get<Record<string, number | string | null>>(
      `SELECT COUNT(*) AS count, SUM(tokens) AS tokens, MIN(created_at) AS oldest
       FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at > ?`,
      [id, since],
    );
    return {
      count: Number(row?.count ?? 0),
      tokens: Number(row?.tokens ?? 0),
      oldest: row?.oldest == null ? null : Number(row.oldest),
    };
  }

  /** The time of the scope's admission at `offset` (0: the oldest) since `since`. */
  async nth(scope: Scope, id: string, since: number, offset: number): Promise<number | undefined> {
    const row = await this.db.get<{ created_at: number | string }>(
      `SELECT created_at FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at > ?
       ORDER BY created_at LIMIT 1 OFFSET ?`,
      [id, since, offset],
    );
    return row ? Number(row.created_at) : undefined;
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

  /**
   * Tokens and media since the start of the day, and tokens since the start of the month: the
   * scope's daily totals folded so far, plus its admissions since (see `fold`).
   */
  async totals(
    scope: Scope,
    id: string,
    periods: { day: number; month: number },
  ): Promise<{ day_tokens: number; day_media_ms: number; month_tokens: number }> {
    const from = Math.min(periods.day, periods.month);
    const scopeId = `${scope}:${id}`;
    const mark = await this.db.get<{ folded_until: number | string }>(
      'SELECT folded_until FROM admission_marks WHERE scope_id = ?',
      [scopeId],
    );
    const foldedUntil = mark ? Number(mark.folded_until) : 0;
    const sums = `SUM(CASE WHEN day >= ? THEN tokens ELSE 0 END) AS day_tokens,
         SUM(CASE WHEN day >= ? THEN media_ms ELSE 0 END) AS day_media_ms,
         SUM(CASE WHEN day >= ? THEN tokens ELSE 0 END) AS month_tokens`;
    const folded = await this.db.get<Record<string, number | string | null>>(
      `SELECT ${sums} FROM admission_totals WHERE scope_id = ? AND day >= ?`,
      [periods.day, periods.day, periods.month, scopeId, from],
    );
    const live = await this.db.get<Record<string, number | string | null>>(
      `SELECT ${sums.replaceAll('day >=', 'created_at >=')}
       FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at >= ?`,
      [periods.day, periods.day, periods.month, id, Math.max(from, foldedUntil)],
    );
    const both = (name: string) => Number(folded?.[name] ?? 0) + Number(live?.[name] ?? 0);
    return {
      day_tokens: both('day_tokens'),
      day_media_ms: both('day_media_ms'),
      month_tokens: both('month_tokens'),
    };
  }

  /**
   * Folds the scope's admissions older than `until` into its daily totals, so budgets sum a few
   * rows of totals and the last minutes' admissions instead of a month of them. Only admissions
   * that can no longer change are folded: those before the scope's oldest held one (a settle
   * rewrites a held one). Called under the scope's lock (`lock`), the only writer of its totals.
   * Answers where folding now stands.
   */
  async fold(scope: Scope, id: string, until: number): Promise<number> {
    const scopeId = `${scope}:${id}`;
    const mark = await this.db.get<{ folded_until: number | string }>(
      'SELECT folded_until FROM admission_marks WHERE scope_id = ?',
      [scopeId],
    );
    const from = mark ? Number(mark.folded_until) : 0;
    const held = await this.db.get<{ oldest: number | string | null }>(
      `SELECT MIN(created_at) AS oldest FROM admissions WHERE ${COLUMN[scope]} = ? AND held = 1`,
      [id],
    );
    const to = held?.oldest == null ? until : Math.min(until, Number(held.oldest));
    if (to <= from) return from;
    await this.db.run(
      `INSERT INTO admission_totals (scope_id, day, tokens, media_ms)
       SELECT ?, created_at - (created_at % 86400000), SUM(tokens), SUM(media_ms)
       FROM admissions WHERE ${COLUMN[scope]} = ? AND created_at >= ? AND created_at < ?
       GROUP BY created_at - (created_at % 86400000)
       ON CONFLICT (scope_id, day) DO UPDATE SET tokens = admission_totals.tokens + excluded.tokens,
         media_ms = admission_totals.media_ms + excluded.media_ms`,
      [scopeId, id, from, to],
    );
    await this.db.run(
      `INSERT INTO admission_marks (scope_id, folded_until) VALUES (?, ?)
       ON CONFLICT (scope_id) DO UPDATE SET folded_until = excluded.folded_until`,
      [scopeId, to],
    );
    return to;
  }

  /**
   * Replaces a held job's reservation by what it used, or keeps it when that is unknown (`undefined`);
   * with `atMostReserved`, by what it used only where that is less (an estimate, which must not
   * count more than was reserved). False when it was settled already (or never admitted).
   */
  async settle(
    jobId: string,
    used: { tokens: number; media_ms: number } | undefined,
    { atMostReserved = false } = {},
  ): Promise<boolean> {
    // Unknown use: the reservation stays what the job counts.
    if (!used) {
      const changed = await this.db.run('UPDATE admissions SET held = 0 WHERE job_id = ? AND held = 1', [
        jobId,
      ]);
      return changed > 0;
    }
    const set = atMostReserved
      ? 'tokens = CASE WHEN tokens < ? THEN tokens ELSE ? END, media_ms = CASE WHEN media_ms < ? THEN media_ms ELSE ? END'
      : 'tokens = ?, media_ms = ?';
    const figures = atMostReserved
      ? [used.tokens, used.tokens, used.media_ms, used.media_ms]
      : [used.tokens, used.media_ms];
    const changed = await this.db.run(
      `UPDATE admissions SET held = 0, ${set} WHERE job_id = ? AND held = 1`,
      [...figures, jobId],
    );
    return changed > 0;
  }

  async get(jobId: string): Promise<Admission | undefined> {
    const row = await this.db.get<Record<string, unknown>>('SELECT * FROM admissions WHERE job_id = ?', [
      jobId,
    ]);
    return row ? numbers(row) : undefined;
  }

  /**
   * Deletes up to `limit` settled admissions older than `before` (past every window), and daily
   * totals older than that; answers how many admissions went.
   */
  async prune(before: number, limit: number): Promise<number> {
    await this.db.run('DELETE FROM admission_totals WHERE day < ?', [before - 86_400_000]);
    return this.db.run(
      `DELETE FROM admissions WHERE job_id IN (
         SELECT job_id FROM admissions WHERE created_at < ? AND held = 0 LIMIT ?)`,
      [before, limit],
    );
  }
}
