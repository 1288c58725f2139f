import { VERSION } from '../version.js';
import type { Dialect, SqlDriver } from './driver.js';

/**
 * Append-only, numbered migrations. Never edit one that has shipped: add the next number.
 * Times are BIGINT epoch milliseconds on both databases so the repositories share their SQL.
 */
/** The columns migration 10 copies, as they stand at version 9. */
const JOB_COLUMNS = `id, org_id, key_id, kind, mode, status, request, result, error_code, error_message, error_details,
        progress, attempts, max_attempts, lease_owner, lease_expires_at, queue_deadline, run_limit_ms, run_deadline,
        created_at, started_at, finished_at, expires_at, webhook_url, webhook_secret, meta, metered, traceparent`;
const DELIVERY_COLUMNS = `id, job_id, org_id, url, event, body, status, attempts, next_attempt_at, lease_owner,
        lease_expires_at, last_status, last_error, created_at, delivered_at`;

export interface Migration {
  version: number;
  name: string;
  sql: (d: Dialect) => string;
  /**
   * It rebuilds tables that others reference (SQLite cannot alter a constraint): on SQLite, foreign
   * keys are off while it runs, as SQLite's own procedure for such changes asks, and every reference
   * is checked before it commits.
   */
  rebuildsTables?: boolean;
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'orgs, api keys, contexts',
    sql: (d) => `
      CREATE TABLE orgs (
        id TEXT PRIMARY KEY,
        name TEXT ${d.binaryCollation} NOT NULL UNIQUE,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT,
        tier TEXT NOT NULL CHECK (tier IN ('free', 'standard')),
        role TEXT NOT NULL CHECK (role IN ('member', 'admin')),
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
      );
      CREATE INDEX api_keys_org ON api_keys (org_id);
      CREATE TABLE contexts (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT ${d.binaryCollation} NOT NULL,
        description TEXT,
        content TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        created_by TEXT NOT NULL,
        UNIQUE (org_id, name)
      );
    `,
  },
  {
    version: 2,
    name: 'jobs, usage ledger, idempotency keys, webhook outbox',
    sql: () => `
      ALTER TABLE orgs ADD COLUMN webhook_secret TEXT;
      CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        mode TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'timeout')),
        request TEXT NOT NULL,
        result TEXT,
        error_code TEXT,
        error_message TEXT,
        error_details TEXT,
        progress REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        lease_owner TEXT,
        lease_expires_at BIGINT,
        queue_deadline BIGINT NOT NULL,
        run_limit_ms BIGINT NOT NULL,
        run_deadline BIGINT,
        created_at BIGINT NOT NULL,
        started_at BIGINT,
        finished_at BIGINT,
        expires_at BIGINT,
        webhook_url TEXT,
        webhook_secret TEXT
      );
      CREATE INDEX jobs_queue ON jobs (status, id);
      CREATE INDEX jobs_org ON jobs (org_id, id);
      CREATE INDEX jobs_leases ON jobs (status, lease_expires_at);
      CREATE TABLE usage_ledger (
        job_id TEXT PRIMARY KEY REFERENCES jobs(id),
        org_id TEXT NOT NULL REFERENCES orgs(id),
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        run_ms BIGINT NOT NULL,
        input_units BIGINT NOT NULL,
        output_units BIGINT NOT NULL,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX usage_org ON usage_ledger (org_id, created_at);
      CREATE TABLE idempotency_keys (
        org_id TEXT NOT NULL REFERENCES orgs(id),
        idem_key TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        job_id TEXT NOT NULL REFERENCES jobs(id),
        created_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, idem_key)
      );
      CREATE TABLE webhook_deliveries (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL UNIQUE REFERENCES jobs(id),
        org_id TEXT NOT NULL REFERENCES orgs(id),
        url TEXT NOT NULL,
        event TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'gone')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease_owner TEXT,
        lease_expires_at BIGINT,
        last_status INTEGER,
        last_error TEXT,
        created_at BIGINT NOT NULL,
        delivered_at BIGINT
      );
      CREATE INDEX webhook_due ON webhook_deliveries (status, next_attempt_at);
    `,
  },
  {
    version: 3,
    name: 'job run facts (route)',
    sql: () => 'ALTER TABLE jobs ADD COLUMN meta TEXT;',
  },
  {
    version: 4,
    name: 'one index fewer on the job hot path',
    // Lease sweeps find running jobs through jobs_queue (status first); a second status index
    // only cost every insert and finish another write.
    sql: () => 'DROP INDEX jobs_leases;',
  },
  {
    version: 5,
    name: 'produced files, settings',
    sql: () => `
      CREATE TABLE files (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        job_id TEXT,
        content_type TEXT NOT NULL,
        size_bytes BIGINT NOT NULL,
        sha256 TEXT NOT NULL,
        storage_key TEXT NOT NULL,
        width INTEGER,
        height INTEGER,
        duration_ms BIGINT,
        fps REAL,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX files_job ON files (job_id);
      CREATE TABLE settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
    `,
  },
  {
    version: 6,
    name: 'response event logs (resumable background streams)',
    sql: () => `
      CREATE TABLE response_events (
        job_id TEXT NOT NULL REFERENCES jobs(id),
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (job_id, seq)
      );
    `,
  },
  {
    version: 7,
    name: 'rate limits and budgets: limits on keys and orgs, admissions',
    // One admission per job of a limited key or org, written with the job: what it reserved, then
    // what it really used. No foreign key to jobs, so purging jobs never waits on the limits.
    sql: () => `
      ALTER TABLE api_keys ADD COLUMN limits TEXT;
      ALTER TABLE orgs ADD COLUMN limits TEXT;
      ALTER TABLE jobs ADD COLUMN metered INTEGER NOT NULL DEFAULT 0;
      CREATE TABLE admissions (
        job_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        media_ms BIGINT NOT NULL,
        held INTEGER NOT NULL
      );
      CREATE INDEX admissions_key ON admissions (key_id, created_at, tokens, media_ms);
      CREATE INDEX admissions_org ON admissions (org_id, created_at, tokens, media_ms);
      CREATE INDEX admissions_held_key ON admissions (key_id) WHERE held = 1;
      CREATE INDEX admissions_held_org ON admissions (org_id) WHERE held = 1;
      CREATE TABLE admission_totals (
        scope_id TEXT NOT NULL,
        day BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        media_ms BIGINT NOT NULL,
        PRIMARY KEY (scope_id, day)
      );
      CREATE TABLE admission_marks (
        scope_id TEXT PRIMARY KEY,
        folded_until BIGINT NOT NULL
      );
    `,
  },
  {
    version: 8,
    name: 'retention: the usage ledger keeps its own key and no longer points at jobs',
    // Jobs past retention are deleted (src/retention/); their usage stays. The ledger is rebuilt
    // without its foreign key to jobs (SQLite cannot drop one), with the key id copied from the job.
    sql: () => `
      CREATE TABLE usage_ledger_v8 (
        job_id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        run_ms BIGINT NOT NULL,
        input_units BIGINT NOT NULL,
        output_units BIGINT NOT NULL,
        created_at BIGINT NOT NULL
      );
      INSERT INTO usage_ledger_v8
        SELECT u.job_id, u.org_id, j.key_id, u.kind, u.status, u.run_ms, u.input_units, u.output_units, u.created_at
        FROM usage_ledger u JOIN jobs j ON j.id = u.job_id;
      DROP TABLE usage_ledger;
      ALTER TABLE usage_ledger_v8 RENAME TO usage_ledger;
      CREATE INDEX usage_org ON usage_ledger (org_id, created_at);
      CREATE INDEX jobs_expiry ON jobs (expires_at) WHERE expires_at IS NOT NULL;
      CREATE INDEX idempotency_created ON idempotency_keys (created_at);
      CREATE INDEX webhook_created ON webhook_deliveries (created_at);
    `,
  },
  {
    version: 9,
    name: 'trace context: the traceparent of the request that submitted a job',
    // A job may run in another process: its span, and its webhook's, join the submitter's trace.
    sql: () => 'ALTER TABLE jobs ADD COLUMN traceparent TEXT;',
  },
  {
    version: 10,
    name: 'statuses checked without a temporary table on SQLite',
    // SQLite checks `status IN (…)` by building a temporary index of the list for every statement
    // that writes the row (about 20k instructions, a few µs, on every job insert and end); the same
    // check spelt with OR costs nothing. SQLite cannot alter a constraint, so both tables are rebuilt
    // as its documentation describes. PostgreSQL checks an IN list cheaply and keeps its tables.
    rebuildsTables: true,
    sql: (d) =>
      d.name !== 'sqlite'
        ? ''
        : `
      CREATE TABLE jobs_v10 (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        mode TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status = 'queued' OR status = 'running' OR status = 'completed'
          OR status = 'failed' OR status = 'cancelled' OR status = 'timeout'),
        request TEXT NOT NULL,
        result TEXT,
        error_code TEXT,
        error_message TEXT,
        error_details TEXT,
        progress REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        lease_owner TEXT,
        lease_expires_at BIGINT,
        queue_deadline BIGINT NOT NULL,
        run_limit_ms BIGINT NOT NULL,
        run_deadline BIGINT,
        created_at BIGINT NOT NULL,
        started_at BIGINT,
        finished_at BIGINT,
        expires_at BIGINT,
        webhook_url TEXT,
        webhook_secret TEXT,
        meta TEXT,
        metered INTEGER NOT NULL DEFAULT 0,
        traceparent TEXT
      );
      INSERT INTO jobs_v10 (${JOB_COLUMNS}) SELECT ${JOB_COLUMNS} FROM jobs;
      DROP TABLE jobs;
      ALTER TABLE jobs_v10 RENAME TO jobs;
      CREATE INDEX jobs_queue ON jobs (status, id);
      CREATE INDEX jobs_org ON jobs (org_id, id);
      CREATE INDEX jobs_expiry ON jobs (expires_at) WHERE expires_at IS NOT NULL;
      CREATE TABLE webhook_deliveries_v10 (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL UNIQUE REFERENCES jobs(id),
        org_id TEXT NOT NULL REFERENCES orgs(id),
        url TEXT NOT NULL,
        event TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status = 'pending' OR status = 'delivered' OR status = 'failed'
          OR status = 'gone'),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease_owner TEXT,
        lease_expires_at BIGINT,
        last_status INTEGER,
        last_error TEXT,
        created_at BIGINT NOT NULL,
        delivered_at BIGINT
      );
      INSERT INTO webhook_deliveries_v10 (${DELIVERY_COLUMNS}) SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries;
      DROP TABLE webhook_deliveries;
      ALTER TABLE webhook_deliveries_v10 RENAME TO webhook_deliveries;
      CREATE INDEX webhook_due ON webhook_deliveries (status, next_attempt_at);
      CREATE INDEX webhook_created ON webhook_deliveries (created_at);
    `,
  },
  {
    version: 11,
    name: 'deleted jobs expire as of their end',
    // A deleted job now expires as of its end, so that the purge can re-date every other terminal
    // job when `jobs.retention` changes without bringing a deleted one back. Deletion empties the
    // request to '{}', which no submission ever stores: that marks the ones deleted before.
    sql: () =>
      `UPDATE jobs SET expires_at = finished_at WHERE request = '{}' AND finished_at IS NOT NULL AND expires_at IS NOT NULL;`,
  },
  {
    version: 12,
    name: 'idempotency keys found by their job',
    // A key is freed when its caller goes away and its job is cancelled, and deleted with its job
    // by the purge; each of those, and a job's deletion checking the key's reference to it, found
    // the key by reading every key of the last day.
    sql: () => 'CREATE INDEX idempotency_job ON idempotency_keys (job_id);',
  },
  {
    version: 13,
    name: 'idempotency keys outlive their purged jobs',
    // A key answers `410 job-expired` for its whole day, also once the purge has deleted its job: it
    // was deleted with it, and a retry after the purge ran the request again. Rebuilt without the
    // foreign key to jobs (SQLite cannot drop one).
    sql: () => `
      CREATE TABLE idempotency_keys_v13 (
        org_id TEXT NOT NULL REFERENCES orgs(id),
        idem_key TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        job_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, idem_key)
      );
      INSERT INTO idempotency_keys_v13 SELECT org_id, idem_key, request_hash, job_id, created_at FROM idempotency_keys;
      DROP TABLE idempotency_keys;
      ALTER TABLE idempotency_keys_v13 RENAME TO idempotency_keys;
      CREATE INDEX idempotency_created ON idempotency_keys (created_at);
      CREATE INDEX idempotency_job ON idempotency_keys (job_id);
    `,
  },
  {
    version: 14,
    name: 'a stream names the process that holds its request',
    // A stream queued, then claimed by a worker of the process holding its request, died with that
    // process as one run there at once does; only the second was recognised (started_at = created_at).
    sql: () => 'ALTER TABLE jobs ADD COLUMN held_by TEXT;',
  },
];

/**
 * Applies every migration newer than the database (up to version `through`: tests build an older
 * store with it), each in its own transaction. Answers how many ran.
 */
export async function migrate(driver: SqlDriver, through = Number.POSITIVE_INFINITY): Promise<number> {
  await driver.prepareDatabase();
  const foreign = await foreignTables(driver);
  if (foreign.length > 0) {
    const named =
      foreign.slice(0, 3).join(', ') + (foreign.length > 3 ? `, and ${foreign.length - 3} more` : '');
    throw new Error(
      `the database holds tables that are not a Kiln store's (${named}) and no kiln_migrations table: Kiln makes its store only in a new or empty database (store.url, store.schema); nothing was changed`,
    );
  }
  await driver.exec(
    'CREATE TABLE IF NOT EXISTS kiln_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)',
  );
  let applied = 0;
  for (const migration of migrations) {
    if (migration.version > through) break;
    const rebuilding = migration.rebuildsTables === true && driver.dialect.name === 'sqlite';
    // Only outside a transaction does SQLite take this pragma; it holds for this connection alone.
    if (rebuilding) await driver.exec('PRAGMA foreign_keys = OFF');
    try {
      const ran = await driver.transaction(async (tx) => {
        if (driver.dialect.migrationLock) await tx.get(driver.dialect.migrationLock);
        const done = await tx.get('SELECT version FROM kiln_migrations WHERE version = ?', [
          migration.version,
        ]);
        if (done) return false;
        for (const statement of splitStatements(migration.sql(driver.dialect))) await tx.run(statement);
        if (rebuilding) {
          const broken = await tx.all<{ table: string; parent: string }>('PRAGMA foreign_key_check');
          if (broken.length > 0)
            throw new Error(
              `migration ${migration.version} would leave ${broken.length} broken reference(s), the first from ${broken[0]?.table} to ${broken[0]?.parent}; nothing was changed`,
            );
        }
        await tx.run('INSERT INTO kiln_migrations (version, name, applied_at) VALUES (?, ?, ?)', [
          migration.version,
          migration.name,
          Date.now(),
        ]);
        return true;
      });
      if (ran) applied++;
    } finally {
      if (rebuilding) await driver.exec('PRAGMA foreign_keys = ON');
    }
  }
  return applied;
}

/**
 * Why this Kiln should not work on a store at schema `version`, when a newer Kiln migrated it: its
 * newest tables' rules are unknown here. Undefined for a store this Kiln knows.
 */
export function newerStoreProblem(version: number): string | undefined {
  if (version <= latestVersion()) return undefined;
  return `the store is at schema version ${version}, newer than this Kiln (${VERSION}) knows (${latestVersion()})`;
}

/**
 * The tables of a database that has no kiln_migrations table: another application's, which Kiln
 * must not add its own beside. None for Kiln's own store, and for a new or empty database.
 */
async function foreignTables(driver: SqlDriver): Promise<string[]> {
  const sql =
    driver.dialect.name === 'sqlite'
      ? "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
      : 'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()';
  const names = (await driver.all<{ name: string }>(sql)).map((row) => row.name);
  return names.includes('kiln_migrations') ? [] : names.sort();
}

/** Kiln's migrations hold plain DDL, so splitting on `;` at line ends is safe. */
function splitStatements(script: string): string[] {
  return script
    .split(/;\s*$/m)
    .map((s) => s.trim())
    .filter(Boolean);
}

export function latestVersion(): number {
  return migrations[migrations.length - 1]?.version ?? 0;
}
