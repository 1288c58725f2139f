import type { Dialect, SqlExecutor } from '../driver.js';
import type { JobOutcome, JobRow, JobStatus } from '../types.js';

/** Who may make a job terminal, checked in the UPDATE itself so only one party ever wins. */
export type FinishGuard =
  | { by: 'worker'; owner: string; attempt: number }
  | { by: 'cancel'; orgId: string }
  | { by: 'queue-ttl'; now: number }
  | { by: 'lease-lost'; now: number }
  | { by: 'orphaned'; now: number };

/**
 * A running stream whose run is in the process that took its request: inserted leased to it
 * (started as it was created), or queued and claimed there later (`held_by`). With that lease lost,
 * the process died, and the request waiting for the stream with it: run again, it would stream for
 * nobody. Null-safe throughout: the requeue takes NOT of it, and NOT of an unknown holds back a job.
 */
const ORPHANED_STREAM = `mode = 'stream' AND ((held_by IS NOT NULL AND lease_owner IS NOT NULL AND lease_owner = held_by)
  OR (attempts = 1 AND started_at IS NOT NULL AND started_at = created_at))`;

const GUARDS: Record<FinishGuard['by'], string> = {
  // The attempt too: a worker whose lease lapsed and that reclaimed the job must not let the old run finish it.
  worker: `status = 'running' AND lease_owner = ? AND attempts = ?`,
  cancel: `status IN ('queued', 'running') AND org_id = ?`,
  'queue-ttl': `status = 'queued' AND queue_deadline <= ?`,
  'lease-lost': `status = 'running' AND lease_expires_at < ? AND attempts >= max_attempts`,
  orphaned: `status = 'running' AND lease_expires_at < ? AND ${ORPHANED_STREAM}`,
};

const guardValues = (guard: FinishGuard): unknown[] =>
  guard.by === 'worker' ? [guard.owner, guard.attempt] : [guard.by === 'cancel' ? guard.orgId : guard.now];

/**
 * A terminal job's usage-ledger row, from the job's own columns: how long it ran, and the units its
 * outcome reports (two parameters, or a batch's columns). The primary key makes a second row impossible.
 */
const LEDGER_INSERT =
  'INSERT INTO usage_ledger (job_id, org_id, key_id, kind, status, run_ms, input_units, output_units, created_at)';
const ledgerValues = (inputUnits: string, outputUnits: string) => `id, org_id, key_id, kind, status,
  CASE WHEN started_at IS NULL OR finished_at IS NULL THEN 0 ELSE finished_at - started_at END,
  ${inputUnits}, ${outputUnits}, finished_at`;
const LEDGER_VALUES = ledgerValues('CAST(? AS BIGINT)', 'CAST(? AS BIGINT)');
const LEDGER_CONFLICT = 'ON CONFLICT (job_id) DO NOTHING';

const json = (value: unknown) => (value === undefined ? null : JSON.stringify(value));

/** A worker's run that ended: the job as the worker holds it, and how it ended. */
export interface FinishedRun {
  known: JobRow;
  owner: string;
  attempt: number;
  outcome: JobOutcome;
}

/** The columns a job's end sets, as stored. */
const endedColumns = (outcome: JobOutcome, now: number, retentionMs: number) => ({
  status: outcome.status,
  result: json(outcome.result),
  error_code: outcome.error?.code ?? null,
  error_message: outcome.error?.message ?? null,
  error_details: json(outcome.error?.details),
  finished_at: now,
  expires_at: now + retentionMs,
});

/** The terminal row, from the row its runner held, the columns its end set and what the store kept. */
const terminalRow = (
  known: JobRow,
  ended: ReturnType<typeof endedColumns>,
  stored: Pick<JobRow, 'meta' | 'progress'>,
): JobRow => ({
  ...known,
  ...ended,
  lease_owner: null,
  lease_expires_at: null,
  meta: stored.meta,
  progress: stored.progress,
});

const placeholders = (n: number) => Array.from({ length: n }, () => '?').join(', ');

/**
 * `(id = ? AND attempts = ?)` a run, OR-ed, and their parameters; padded to a power of two with
 * terms that match nothing (`id = NULL`): one statement text per power of two.
 */
function termPerRun(runs: ReadonlyArray<{ id: string; attempt: number }>): [string, unknown[]] {
  const terms = 2 ** Math.ceil(Math.log2(runs.length));
  const params: unknown[] = runs.flatMap((r) => [r.id, r.attempt]);
  while (params.length < 2 * terms) params.push(null);
  return [`(${Array.from({ length: terms }, () => '(id = ? AND attempts = ?)').join(' OR ')})`, params];
}

export type NewJob = Pick<
  JobRow,
  | 'id'
  | 'org_id'
  | 'key_id'
  | 'kind'
  | 'mode'
  | 'request'
  | 'max_attempts'
  | 'queue_deadline'
  | 'run_limit_ms'
  | 'created_at'
  | 'webhook_url'
  | 'webhook_secret'
> & {
  /** Set to insert the job already claimed by a worker of this process (sync and stream requests). */
  lease?: { owner: string; until: number };
  /** Set when the job has an admission to settle when it ends. */
  metered?: boolean;
  /** The submitting span, when tracing is on. */
  traceparent?: string | null;
  /** A stream's: the worker owner of the process holding its request. */
  held_by?: string | null;
};

/** The queue's statements, one method each; every change to a running job names its lease holder. */
export class JobRepository {
  constructor(
    private readonly db: SqlExecutor,
    private readonly dialect: Dialect,
  ) {}

  /**
   * Inserts the job, queued — or running, claimed by `job.lease`'s owner as its first attempt — and
   * answers its row, built here rather than read back: every column is known.
   */
  async insert(job: NewJob): Promise<JobRow> {
    const lease = job.lease;
    const row: JobRow = {
      id: job.id,
      org_id: job.org_id,
      key_id: job.key_id,
      kind: job.kind,
      mode: job.mode,
      status: lease ? 'running' : 'queued',
      request: job.request,
      result: null,
      error_code: null,
      error_message: null,
      error_details: null,
      progress: null,
      attempts: lease ? 1 : 0,
      max_attempts: job.max_attempts,
      lease_owner: lease?.owner ?? null,
      lease_expires_at: lease?.until ?? null,
      queue_deadline: job.queue_deadline,
      run_limit_ms: job.run_limit_ms,
      run_deadline: lease ? job.created_at + job.run_limit_ms : null,
      created_at: job.created_at,
      started_at: lease ? job.created_at : null,
      finished_at: null,
      expires_at: null,
      webhook_url: job.webhook_url,
      webhook_secret: job.webhook_secret,
      meta: null,
      metered: job.metered ? 1 : 0,
      traceparent: job.traceparent ?? null,
      held_by: job.held_by ?? null,
    };
    await this.db.run(
      `INSERT INTO jobs (id, org_id, key_id, kind, mode, status, request, max_attempts, queue_deadline, run_limit_ms,
         created_at, webhook_url, webhook_secret, lease_owner, lease_expires_at, attempts, started_at, run_deadline, metered,
         traceparent, held_by)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        row.id,
        row.org_id,
        row.key_id,
        row.kind,
        row.mode,
        row.status,
        row.request,
        row.max_attempts,
        row.queue_deadline,
        row.run_limit_ms,
        row.created_at,
        row.webhook_url,
        row.webhook_secret,
        row.lease_owner,
        row.lease_expires_at,
        row.attempts,
        row.started_at,
        row.run_deadline,
        row.metered,
        row.traceparent,
        row.held_by,
      ],
    );
    return row;
  }

  /** Takes the oldest queued job of these kinds for `owner` until `leaseUntil`; undefined when none is waiting. */
  async claimNext(
    owner: string,
    kinds: readonly string[],
    now: number,
    leaseUntil: number,
  ): Promise<JobRow | undefined> {
    if (kinds.length === 0) return undefined;
    return this.db.get<JobRow>(
      `UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires_at = ?, attempts = attempts + 1,
         started_at = COALESCE(started_at, ?), run_deadline = ? + run_limit_ms
       WHERE id = (
         SELECT id FROM jobs WHERE status = 'queued' AND queue_deadline > ? AND kind IN (${placeholders(kinds.length)})
         ORDER BY id LIMIT 1${this.dialect.skipLocked}
       ) AND status = 'queued'
       RETURNING *`,
      [owner, leaseUntil, now, now, now, ...kinds],
    );
  }

  /**
   * Extends `owner`'s leases on these runs (job id and attempt); answers the ids it still holds —
   * a cancelled, finished or reclaimed job is missing.
   *
   * SQLite gets the runs as one JSON array, in a statement of one text whatever their number. A term
   * a run, as PostgreSQL gets them, is an expression tree SQLite refuses past 997 runs (deeper than
   * 1,000; jobs.workers allows 1,024), and SQLite does this work on the event loop, where that
   * statement held every relayed stream about 1 ms at 256 runs (3–4 ms the first time a count came),
   * 0.5 ms now. PostgreSQL keeps the terms: with the runs as arrays, its prepared statement measured
   * 86–137 ms at 1,024 runs, against 20–29 ms. Their number is padded to a power of two with terms
   * that match nothing (`id = NULL`): a worker's renewals take one statement text per power of two
   * (11 up to jobs.workers' 1,024), each prepared once on a connection, rather than one for every
   * number of runs it ever held, which took names from the statements that need them.
   */
  async renewLeases(
    owner: string,
    runs: ReadonlyArray<{ id: string; attempt: number }>,
    leaseUntil: number,
  ): Promise<Set<string>> {
    if (runs.length === 0) return new Set();
    // PostgreSQL: a term a run, each found by its primary key. SQLite: each pair looked up through
    // jobs_queue (status, id).
    const [runsMatch, runParams] =
      this.dialect.name === 'postgres'
        ? termPerRun(runs)
        : [
            '(id, attempts) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))',
            [JSON.stringify(runs.map((r) => [r.id, r.attempt]))],
          ];
    const rows = await this.db.all<{ id: string }>(
      `UPDATE jobs SET lease_expires_at = ? WHERE lease_owner = ? AND status = 'running' AND ${runsMatch}
         RETURNING id`,
      [leaseUntil, owner, ...runParams],
    );
    return new Set(rows.map((r) => r.id));
  }

  /** Hands `owner`'s running jobs back to the queue (graceful shutdown): the interrupted run is not counted. */
  async release(owner: string, now: number): Promise<number> {
    return this.db.run(
      `UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, run_deadline = NULL,
         attempts = attempts - 1, queue_deadline = ? + (queue_deadline - created_at)
       WHERE status = 'running' AND lease_owner = ?`,
      [now, owner],
    );
  }

  /**
   * Deletes what a terminal job holds (its request, result, error details and facts) and expires it
   * as of its end, as if its retention had been nil: its polls answer 410 from then on, and no
   * change of `jobs.retention` dates it again (the purge re-dates only jobs expiring after their
   * end). The row itself, which the usage ledger and the webhook outbox point at, stays. False when
   * no such terminal job exists.
   */
  async forget(orgId: string, id: string): Promise<boolean> {
    const changed = await this.db.run(
      `UPDATE jobs SET request = '{}', result = NULL, error_message = NULL, error_details = NULL, meta = NULL,
         expires_at = finished_at
       WHERE id = ? AND org_id = ? AND status IN ('completed', 'failed', 'cancelled', 'timeout')`,
      [id, orgId],
    );
    return changed > 0;
  }

  /**
   * What a run cancelled from another process had recorded (its route), which that cancel could not
   * store: kept on the cancelled job of that attempt, where nothing is stored yet and the job was
   * not forgotten since.
   */
  async keepCancelledMeta(id: string, attempt: number, meta: Record<string, unknown>): Promise<void> {
    await this.db.run(
      `UPDATE jobs SET meta = ?
       WHERE id = ? AND status = 'cancelled' AND attempts = ? AND meta IS NULL AND request <> '{}'`,
      [json(meta), id, attempt],
    );
  }

  async setProgress(id: string, owner: string, attempt: number, progress: number): Promise<void> {
    await this.db.run(
      `UPDATE jobs SET progress = ? WHERE id = ? AND status = 'running' AND lease_owner = ? AND attempts = ?`,
      [progress, id, owner, attempt],
    );
  }

  /**
   * Makes the job terminal if `guard` still holds, and writes its one usage-ledger row with it;
   * answers the terminal row, or undefined if another party won. PostgreSQL does both in one
   * statement (one round trip); SQLite, whose statements cost no round trip, in two. With the row as
   * its runner holds it (`known`), the terminal row is built from it rather than read back: only the
   * columns the run may have moved (progress, meta) come back, and on SQLite not even those when the
   * job completed with what its run recorded.
   */
  async finish(
    id: string,
    guard: FinishGuard,
    outcome: JobOutcome,
    now: number,
    retentionMs: number,
    known?: JobRow,
  ): Promise<JobRow | undefined> {
    const update = `UPDATE jobs SET status = ?, result = ?, error_code = ?, error_message = ?, error_details = ?,
         finished_at = ?, expires_at = ?, lease_owner = NULL, lease_expires_at = NULL, meta = COALESCE(?, meta),
         progress = CASE WHEN ? = 'completed' THEN 1 ELSE progress END
       WHERE id = ? AND ${GUARDS[guard.by]}`;
    // The terminal columns, in the UPDATE's order: its first parameters, and the built row's.
    const ended = endedColumns(outcome, now, retentionMs);
    const meta = json(outcome.meta);
    const params = [...Object.values(ended), meta, outcome.status, id, ...guardValues(guard)];
    const units = [outcome.usage?.inputUnits ?? 0, outcome.usage?.outputUnits ?? 0];
    const returning = known
      ? 'RETURNING id, org_id, key_id, kind, status, started_at, finished_at, progress, meta'
      : 'RETURNING *';
    let row: JobRow | undefined;
    if (this.dialect.name === 'postgres') {
      row = await this.db.get<JobRow>(
        `WITH finished AS (${update} ${returning}), ledger AS (${LEDGER_INSERT} SELECT ${LEDGER_VALUES} FROM finished ${LEDGER_CONFLICT})
         SELECT * FROM finished`,
        [...params, ...units],
      );
    } else if (known && outcome.status === 'completed' && outcome.meta !== undefined) {
      // Every column of the terminal row is known (a completed job's progress is 1, its meta what
      // the run recorded): no RETURNING, which costs SQLite a temporary table for each statement.
      if ((await this.db.run(update, params)) === 0) return undefined;
      row = terminalRow(known, ended, { meta, progress: 1 });
      await this.#ledger(row, units);
      return row;
    } else {
      row = await this.db.get<JobRow>(`${update} ${returning}`, params);
      if (row) await this.#ledger(row, units);
    }
    if (!row || !known) return row;
    return terminalRow(known, ended, row);
  }

  /** SQLite: the usage-ledger row of a job made terminal by the statement before. */
  async #ledger(
    row: Pick<JobRow, 'id' | 'org_id' | 'key_id' | 'kind' | 'status' | 'started_at' | 'finished_at'>,
    units: readonly number[],
  ): Promise<void> {
    const runMs = row.started_at === null || row.finished_at === null ? 0 : row.finished_at - row.started_at;
    await this.db.run(`${LEDGER_INSERT} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ${LEDGER_CONFLICT}`, [
      row.id,
      row.org_id,
      row.key_id,
      row.kind,
      row.status,
      runMs,
      ...units,
      row.finished_at,
    ]);
  }

  /**
   * PostgreSQL only: the ends of several runs, each guarded as a worker's `finish` is, in one
   * statement with their usage rows. Answers each run's terminal row, in order, built from the row
   * its worker holds; undefined where the guard no longer held (cancelled, reclaimed).
   */
  async finishRuns(
    runs: readonly FinishedRun[],
    now: number,
    retentionMs: number,
  ): Promise<Array<JobRow | undefined>> {
    if (this.dialect.name !== 'postgres')
      throw new Error('finishRuns is for PostgreSQL: SQLite ends runs one by one');
    const ended = runs.map((run) => endedColumns(run.outcome, now, retentionMs));
    const rows = await this.db.all<Pick<JobRow, 'id' | 'attempts' | 'meta' | 'progress'>>(
      `WITH v AS (
         SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]),
           CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS INTEGER[]),
           CAST(? AS BIGINT[]), CAST(? AS BIGINT[]))
         AS v(id, status, result, error_code, error_message, error_details, meta, owner, attempt, input_units, output_units)
       ), finished AS (
         UPDATE jobs SET status = v.status, result = v.result, error_code = v.error_code,
           error_message = v.error_message, error_details = v.error_details, finished_at = CAST(? AS BIGINT),
           expires_at = CAST(? AS BIGINT), lease_owner = NULL, lease_expires_at = NULL,
           meta = COALESCE(v.meta, jobs.meta),
           progress = CASE WHEN v.status = 'completed' THEN 1 ELSE jobs.progress END
         FROM v
         WHERE jobs.id = v.id AND jobs.status = 'running' AND jobs.lease_owner = v.owner AND jobs.attempts = v.attempt
         RETURNING jobs.id, jobs.attempts, jobs.org_id, jobs.key_id, jobs.kind, jobs.status, jobs.started_at,
           jobs.finished_at, jobs.meta, jobs.progress, v.input_units, v.output_units
       ), ledger AS (
         ${LEDGER_INSERT} SELECT ${ledgerValues('input_units', 'output_units')} FROM finished ${LEDGER_CONFLICT}
       )
       SELECT id, attempts, meta, progress FROM finished`,
      [
        runs.map((run) => run.known.id),
        ended.map((e) => e.status),
        ended.map((e) => e.result),
        ended.map((e) => e.error_code),
        ended.map((e) => e.error_message),
        ended.map((e) => e.error_details),
        runs.map((run) => json(run.outcome.meta)),
        runs.map((run) => run.owner),
        runs.map((run) => run.attempt),
        runs.map((run) => run.outcome.usage?.inputUnits ?? 0),
        runs.map((run) => run.outcome.usage?.outputUnits ?? 0),
        now,
        now + retentionMs,
      ],
    );
    // By run, not by job: a stale run of a job (a lapsed lease) may end beside the job's current run.
    const byRun = new Map(rows.map((row) => [`${row.id} ${row.attempts}`, row]));
    return runs.map((run, i) => {
      const row = byRun.get(`${run.known.id} ${run.attempt}`);
      return row && terminalRow(run.known, ended[i] as ReturnType<typeof endedColumns>, row);
    });
  }

  /**
   * Jobs whose worker stopped renewing its lease go back to the queue with a fresh queue TTL, while
   * they have attempts left. Answers how many.
   */
  async requeueLost(now: number): Promise<number> {
    return this.db.run(
      `UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, run_deadline = NULL,
         queue_deadline = ? + (queue_deadline - created_at)
       WHERE status = 'running' AND lease_expires_at < ? AND attempts < max_attempts
         AND NOT (${ORPHANED_STREAM})`,
      [now, now],
    );
  }

  /** Up to `limit` stream jobs whose lease was lost with the process that held their request. */
  async orphanedStreams(now: number, limit: number): Promise<Array<{ id: string; org_id: string }>> {
    return this.db.all(
      `SELECT id, org_id FROM jobs WHERE status = 'running' AND lease_expires_at < ? AND ${ORPHANED_STREAM} LIMIT ?`,
      [now, limit],
    );
  }

  /** Ids of jobs that must now end without a worker: queue TTL passed, or a lost lease with no attempts left. */
  async overdue(now: number, limit: number): Promise<Array<{ id: string; why: 'queue-ttl' | 'lease-lost' }>> {
    return this.db.all(
      `SELECT id, 'queue-ttl' AS why FROM jobs WHERE status = 'queued' AND queue_deadline <= ?
       UNION ALL
       SELECT id, 'lease-lost' AS why FROM jobs WHERE status = 'running' AND lease_expires_at < ? AND attempts >= max_attempts
       LIMIT ?`,
      [now, now, limit],
    );
  }

  /**
   * Queued and running jobs per kind, for /metrics: how many, the oldest one's creation time and
   * their mean progress. Reads only the unfinished jobs, through the (status, id) index.
   */
  async unfinishedByKind(): Promise<
    Array<{
      kind: string;
      status: 'queued' | 'running';
      jobs: number;
      oldest_created_at: number;
      progress: number;
    }>
  > {
    return this.db.all(
      `SELECT kind, status, COUNT(*) AS jobs, MIN(created_at) AS oldest_created_at,
         CAST(AVG(COALESCE(progress, 0)) AS DOUBLE PRECISION) AS progress
       FROM jobs WHERE status IN ('queued', 'running') GROUP BY kind, status`,
    );
  }

  async get(orgId: string, id: string): Promise<JobRow | undefined> {
    return this.db.get<JobRow>('SELECT * FROM jobs WHERE id = ? AND org_id = ?', [id, orgId]);
  }

  async byId(id: string): Promise<JobRow | undefined> {
    return this.db.get<JobRow>('SELECT * FROM jobs WHERE id = ?', [id]);
  }

  /** The job's status alone: what a watcher polls, without its request and result. */
  async statusOf(id: string): Promise<JobStatus | undefined> {
    return (await this.db.get<{ status: JobStatus }>('SELECT status FROM jobs WHERE id = ?', [id]))?.status;
  }

  /**
   * The organisation's jobs, newest first; `after` is the last id of the previous page. A job
   * deleted or past its retention at `now` is not listed, as its poll answers 410.
   */
  async list(
    orgId: string,
    options: { status?: JobStatus; kind?: string; after?: string; limit: number; now: number },
  ): Promise<{ data: JobRow[]; has_more: boolean }> {
    const where = ['org_id = ?', '(expires_at IS NULL OR expires_at > ?)'];
    const params: unknown[] = [orgId, options.now];
    if (options.status) {
      where.push('status = ?');
      params.push(options.status);
    }
    if (options.kind) {
      where.push('kind = ?');
      params.push(options.kind);
    }
    // A cursor given empty (unparseable, from the API) matches nothing: every id sorts after ''.
    if (options.after !== undefined) {
      where.push('id < ?');
      params.push(options.after);
    }
    params.push(options.limit + 1);
    const rows = await this.db.all<JobRow>(
      `SELECT * FROM jobs WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT ?`,
      params,
    );
    return { data: rows.slice(0, options.limit), has_more: rows.length > options.limit };
  }
}
