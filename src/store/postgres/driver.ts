import pg from 'pg';
import { timeStoreOperation } from '../../metrics/store.js';
import type { Channel, Dialect, SqlDriver, SqlExecutor, TransactionOptions } from '../driver.js';
import { storeOpenError } from './open-error.js';

const dialect: Dialect = {
  name: 'postgres',
  binaryCollation: 'COLLATE "C"',
  // Any constant works; it only has to be the same in every Kiln process.
  migrationLock: 'SELECT pg_advisory_xact_lock(4242100)',
  skipLocked: ' FOR UPDATE SKIP LOCKED',
  scopeLock: 'SELECT pg_advisory_xact_lock(4242101, hashtext(?))',
  sharedAcrossProcesses: true,
};

const INT8_OID = 20;

/** Repositories write `?`; PostgreSQL wants `$1, $2, …`. Kiln's SQL never has `?` in a literal. */
export function toNumberedPlaceholders(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/** Distinct SQL texts given a name, so each connection parses and plans them once. */
const MAX_NAMED_STATEMENTS = 256;
const statements = new Map<string, { text: string; name: string | undefined }>();
/** Moves when every name is dropped (`renameStatements`), so that names are never reused. */
let generation = 0;

/**
 * PostgreSQL refuses, on that connection and every time, a prepared statement whose answer's columns
 * changed since it was prepared: another process migrated the schema (a rolling upgrade adding a
 * column to `jobs`, which `SELECT *` answers).
 */
function isStalePlan(error: unknown): boolean {
  return (
    (error as { code?: unknown } | undefined)?.code === '0A000' &&
    String((error as Error).message).includes('cached plan must not change result type')
  );
}

/** Every statement gets a new name: each connection prepares it again, against today's schema. */
function renameStatements(): void {
  statements.clear();
  generation++;
}

/** The numbered text of `sql`, named for a prepared statement while there is room for more names. */
function statement(sql: string): { text: string; name: string | undefined } {
  let known = statements.get(sql);
  if (!known) {
    // First come, first named: the hot statements are among the first a process runs, and texts
    // that vary with a list's length (IN lists, lease renewals) stop taking names at the cap.
    const named = statements.size < MAX_NAMED_STATEMENTS;
    known = {
      text: toNumberedPlaceholders(sql),
      name: named ? `kiln_${generation}_${statements.size}` : undefined,
    };
    statements.set(sql, known);
  }
  return known;
}

/** One statement on `client`, prepared by name while there is room. */
function query(client: pg.Pool | pg.PoolClient, sql: string, params: readonly unknown[]) {
  const { text, name } = statement(sql);
  return client.query(
    name ? { name, text, values: params as unknown[] } : { text, values: params as unknown[] },
  );
}

/** `INSERT INTO t (…) VALUES (?, …)` and nothing more: the rows of several can go in one statement. */
const SIMPLE_INSERT = /^(\s*INSERT INTO \w+ \([^)]*\)\s*VALUES )(\((?:\?, )*\?\))\s*$/;

/** A statement a unit of a one-statement group asked for, answered once the group is committed. */
interface Asked {
  method: 'all' | 'get' | 'run';
  sql: string;
  params: readonly unknown[];
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

/** What `method` answers of a statement's result. */
function answer(method: Asked['method'], result: pg.QueryResult): unknown {
  if (method === 'all') return result.rows;
  if (method === 'get') return result.rows[0];
  return result.rowCount ?? 0;
}

function executor(client: pg.Pool | pg.PoolClient): SqlExecutor {
  // Each statement is timed with its round trip (and, on the pool, any wait for a free connection).
  const once = async (method: Asked['method'], sql: string, params: readonly unknown[]) =>
    answer(method, await timeStoreOperation(method, () => query(client, sql, params)));
  // On the pool a statement stands alone, so one refused for a stale plan runs again, renamed; in a
  // transaction it has ended the transaction, which `#commitAlone` runs again.
  const run = async (method: Asked['method'], sql: string, params: readonly unknown[] = []) =>
    client instanceof pg.Pool
      ? once(method, sql, params).catch((error: unknown) => {
          if (!isStalePlan(error)) throw error;
          renameStatements();
          return once(method, sql, params);
        })
      : once(method, sql, params);
  return {
    all: <T>(sql: string, params?: readonly unknown[]) => run('all', sql, params) as Promise<T[]>,
    get: <T>(sql: string, params?: readonly unknown[]) => run('get', sql, params) as Promise<T | undefined>,
    run: (sql: string, params?: readonly unknown[]) => run('run', sql, params) as Promise<number>,
  };
}

interface GroupUnit {
  fn: (tx: SqlExecutor) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  /** `fn` issues one statement (TransactionOptions). */
  oneStatement: boolean;
}

/** How long after losing its listening connection the driver makes it again. */
const RELISTEN_MS = 1000;

/** Groups committing at once, each on a connection of its own. */
const MAX_GROUPS_IN_FLIGHT = 2;
/** Units in one group: a failure re-runs them all one by one, so a group stays modest. */
const MAX_GROUP_UNITS = 64;

export interface PostgresOptions {
  url: string;
  schema: string;
  poolSize: number;
}

export class PostgresDriver implements SqlDriver {
  readonly dialect = dialect;
  readonly #pool: pg.Pool;
  readonly #schema: string;
  readonly #executor: SqlExecutor;
  readonly #url: string;
  readonly #waiting: GroupUnit[] = [];
  #groupsInFlight = 0;
  #groupScheduled = false;
  #listener: Promise<pg.Client> | undefined;
  #listenerUp = false;
  #closed = false;
  readonly #handlers = new Map<Channel, Set<(payload: string) => void>>();

  constructor(options: PostgresOptions) {
    this.#schema = options.schema;
    this.#url = options.url;
    this.#pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize,
      // Connections stay open once made: pg-pool's default closes one idle for 10 s, and a burst
      // after a quiet spell then waited for new connections (a PostgreSQL backend each) and for
      // every statement to be prepared again on them — 256 streams started together took 260–280
      // ms to their first token instead of 80–160. At most pool_size are held.
      idleTimeoutMillis: 0,
      // A connection writes the statements it is given without waiting for each answer: a group's
      // go out together (#commitStatements). One at a time, it behaves as without.
      pipeline: true,
      options: `-c search_path=${options.schema}`,
      // Timestamps are epoch milliseconds in BIGINT columns: well inside Number's exact range.
      types: {
        getTypeParser: ((oid: number, format?: string) =>
          oid === INT8_OID
            ? Number
            : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
      },
    });
    // An idle client losing its connection must not crash the process; the next query reconnects.
    this.#pool.on('error', () => undefined);
    this.#executor = executor(this.#pool);
  }

  all<T>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    return this.#executor.all<T>(sql, params);
  }

  get<T>(sql: string, params?: readonly unknown[]): Promise<T | undefined> {
    return this.#executor.get<T>(sql, params);
  }

  run(sql: string, params?: readonly unknown[]): Promise<number> {
    return this.#executor.run(sql, params);
  }

  /**
   * Group commit, as on SQLite: transactions asked for while others commit wait and then go
   * together, in one transaction and one COMMIT (a few groups at a time). Should any unit fail, the
   * group rolls back and each unit runs again in a transaction of its own, so only the failing one
   * fails — and each resolves only once its own work is committed.
   */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const unit = { fn, resolve, reject, oneStatement: options.oneStatement === true } as GroupUnit;
      if (options.alone) return void this.#commitAlone(unit);
      this.#waiting.push(unit);
      this.#startGroups();
    });
  }

  #startGroups(): void {
    if (this.#groupScheduled) return;
    this.#groupScheduled = true;
    // The rest of this turn's transactions join the group.
    setImmediate(() => {
      this.#groupScheduled = false;
      while (this.#waiting.length > 0 && this.#groupsInFlight < MAX_GROUPS_IN_FLIGHT) {
        const units = this.#waiting.splice(0, MAX_GROUP_UNITS);
        this.#groupsInFlight++;
        void this.#commitGroup(units).finally(() => {
          this.#groupsInFlight--;
          if (this.#waiting.length > 0) this.#startGroups();
        });
      }
    });
  }

  async #commitGroup(units: GroupUnit[]): Promise<void> {
    if (units.length > 1 && units.every((unit) => unit.oneStatement)) return this.#commitStatements(units);
    const [first] = units as [GroupUnit];
    // A group of one statement commits by itself: no BEGIN, no COMMIT.
    if (units.length === 1 && first.oneStatement) {
      await first.fn(this.#executor).then(first.resolve, first.reject);
      return;
    }
    if (units.length === 1) return this.#commitAlone(first);
    const values: unknown[] = [];
    let client: pg.PoolClient | undefined;
    try {
      client = await this.#pool.connect();
      const tx = executor(client);
      await client.query('BEGIN');
      for (const unit of units) values.push(await unit.fn(tx));
      await client.query('COMMIT');
    } catch {
      await client?.query('ROLLBACK').catch(() => undefined);
      client?.release();
      await Promise.all(units.map((unit) => this.#commitAlone(unit)));
      return;
    }
    client.release();
    units.forEach((unit, i) => {
      unit.resolve(values[i]);
    });
  }

  /**
   * A group whose units each issue one statement: their statements are gathered first, inserts into
   * the same table merged into one multi-row INSERT, and the lot committed in one transaction, each
   * unit answered once it is committed. Should it fail, each statement runs again on its own.
   */
  async #commitStatements(units: GroupUnit[]): Promise<void> {
    const asked: Asked[] = [];
    let gathering = true;
    await Promise.all(
      units.map(
        (unit) =>
          new Promise<void>((ready) => {
            const ask =
              (method: Asked['method']) =>
              (sql: string, params: readonly unknown[] = []): Promise<never> => {
                // A second statement (not what the unit promised) runs by itself.
                if (!gathering) return this.#executor[method](sql, params) as Promise<never>;
                return new Promise((resolve, reject) => {
                  asked.push({ method, sql, params, resolve, reject });
                  ready();
                });
              };
            const tx = { all: ask('all'), get: ask('get'), run: ask('run') } as SqlExecutor;
            Promise.resolve()
              .then(() => unit.fn(tx))
              .then(unit.resolve, unit.reject)
              .finally(ready);
          }),
      ),
    );
    gathering = false;
    if (asked.length === 0) return;
    const steps: Array<{ sql: string; params: unknown[]; asked: Asked[] }> = [];
    const inserts = new Map<string, Asked[]>();
    for (const one of asked) {
      if (one.method === 'run' && SIMPLE_INSERT.test(one.sql)) {
        const same = inserts.get(one.sql);
        if (same) same.push(one);
        else inserts.set(one.sql, [one]);
      } else steps.push({ sql: one.sql, params: [...one.params], asked: [one] });
    }
    for (const [sql, same] of inserts) {
      const [, head, row] = SIMPLE_INSERT.exec(sql) as unknown as [string, string, string];
      steps.unshift({
        sql: same.length === 1 ? sql : `${head}${same.map(() => row).join(', ')}`,
        params: same.flatMap((one) => one.params),
        asked: same,
      });
    }
    let client: pg.PoolClient | undefined;
    let results: pg.QueryResult[];
    try {
      client = await this.#pool.connect();
      const on = client;
      // Pipelined: every statement, BEGIN and COMMIT included, goes out in one write before the
      // first answer comes back, so the group costs one round trip. Should a statement fail, those
      // after it fail too (the transaction is aborted) and the COMMIT rolls back.
      const socket = on.connection.stream;
      socket.cork();
      let begin: Promise<unknown> | undefined;
      let answers: Array<Promise<pg.QueryResult>>;
      let commit: Promise<unknown> | undefined;
      try {
        begin = steps.length > 1 ? on.query('BEGIN') : undefined;
        answers = steps.map((step) => {
          const method = step.asked.length > 1 ? 'run' : (step.asked[0] as Asked).method;
          return timeStoreOperation(method, () => query(on, step.sql, step.params));
        });
        commit = steps.length > 1 ? on.query('COMMIT') : undefined;
      } finally {
        socket.uncork();
      }
      const settled = await Promise.allSettled([begin, ...answers, commit]);
      const failed = settled.find((one) => one.status === 'rejected');
      if (failed) throw failed.reason;
      results = await Promise.all(answers);
    } catch {
      if (steps.length > 1) await client?.query('ROLLBACK').catch(() => undefined);
      client?.release();
      await Promise.all(
        asked.map((one) => this.#executor[one.method](one.sql, one.params).then(one.resolve, one.reject)),
      );
      return;
    }
    client.release();
    steps.forEach((step, i) => {
      const result = results[i] as pg.QueryResult;
      // A merged insert added one row for each.
      if (step.asked.length > 1) for (const one of step.asked) one.resolve(1);
      else step.asked[0]?.resolve(answer(step.asked[0].method, result));
    });
  }

  async #commitAlone(unit: GroupUnit, again = false): Promise<void> {
    let client: pg.PoolClient | undefined;
    let failure: unknown;
    try {
      client = await this.#pool.connect();
      await client.query('BEGIN');
      const value = await unit.fn(executor(client));
      await client.query('COMMIT');
      unit.resolve(value);
      return;
    } catch (error) {
      await client?.query('ROLLBACK').catch(() => undefined);
      failure = error;
    } finally {
      client?.release();
    }
    if (again || !isStalePlan(failure)) return unit.reject(failure);
    renameStatements();
    return this.#commitAlone(unit, true);
  }

  async exec(script: string): Promise<void> {
    await this.#pool.query(script);
  }

  async notify(channel: Channel, payload: string): Promise<void> {
    await this.#pool.query('SELECT pg_notify($1, $2)', [this.#channel(channel), payload]);
  }

  /** Channels carry the schema's name, so test runs and deployments sharing a database stay apart. */
  #channel(channel: Channel): string {
    return `${channel}_${this.#schema}`;
  }

  /**
   * One dedicated connection LISTENs for every channel this process cares about. Should it be lost
   * (the server restarted, the backend was ended), it is made again a second later, and again until
   * it is back, listening to every channel again; `listenerUp` is false meanwhile.
   */
  #connectListener(): Promise<pg.Client> {
    this.#listener ??= this.#openListener();
    return this.#listener;
  }

  async #openListener(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.#url });
    client.on('notification', (message) => {
      const channel = [...this.#handlers.keys()].find((c) => this.#channel(c) === message.channel);
      for (const handler of channel ? (this.#handlers.get(channel) ?? []) : [])
        handler(message.payload ?? '');
    });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      this.#listenerUp = false;
      this.#listener = undefined;
      void client.end().catch(() => undefined);
      if (!this.#closed)
        setTimeout(() => {
          if (!this.#closed && !this.#listener) this.#connectListener().catch(() => undefined);
        }, RELISTEN_MS).unref();
    };
    client.on('error', onLost);
    client.on('end', onLost);
    try {
      await client.connect();
      for (const channel of this.#handlers.keys()) await client.query(`LISTEN "${this.#channel(channel)}"`);
    } catch (error) {
      onLost();
      throw error;
    }
    this.#listenerUp = true;
    return client;
  }

  listenerUp(): boolean {
    return this.#listenerUp;
  }

  async listen(channel: Channel, handler: (payload: string) => void): Promise<() => Promise<void>> {
    const client = await this.#connectListener();
    let handlers = this.#handlers.get(channel);
    if (!handlers) {
      handlers = new Set();
      this.#handlers.set(channel, handlers);
      await client.query(`LISTEN "${this.#channel(channel)}"`);
    }
    handlers.add(handler);
    return async () => {
      handlers.delete(handler);
    };
  }

  /**
   * Creates the configured schema when missing, so a fresh database needs no manual step. This is
   * the store's first connection: a failure says what was tried and where the URL comes from.
   */
  async prepareDatabase(): Promise<void> {
    try {
      await this.#pool.query(`CREATE SCHEMA IF NOT EXISTS "${this.#schema}"`);
    } catch (error) {
      throw storeOpenError(this.#url, error);
    }
  }

  async ping(): Promise<void> {
    await this.#pool.query('SELECT 1');
  }

  async close(): Promise<void> {
    this.#closed = true;
    const listener = this.#listener;
    this.#listener = undefined;
    if (listener) await (await listener).end().catch(() => undefined);
    await this.#pool.end();
  }
}
