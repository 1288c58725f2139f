import pg from 'pg';
import type { Channel, Dialect, SqlDriver, SqlExecutor } from '../driver.js';

const dialect: Dialect = {
  name: 'postgres',
  binaryCollation: 'COLLATE "C"',
  // Any constant works; it only has to be the same in every Kiln process.
  migrationLock: 'SELECT pg_advisory_xact_lock(4242100)',
  skipLocked: ' FOR UPDATE SKIP LOCKED',
  sharedAcrossProcesses: true,
};

const INT8_OID = 20;

/** Repositories write `?`; PostgreSQL wants `$1, $2, …`. Kiln's SQL never has `?` in a literal. */
export function toNumberedPlaceholders(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

function executor(client: pg.Pool | pg.PoolClient): SqlExecutor {
  const cache = new Map<string, string>();
  const text = (sql: string) => {
    let converted = cache.get(sql);
    if (converted === undefined) {
      converted = toNumberedPlaceholders(sql);
      cache.set(sql, converted);
    }
    return converted;
  };
  return {
    all: async <T>(sql: string, params: readonly unknown[] = []) =>
      (await client.query(text(sql), params as unknown[])).rows as T[],
    get: async <T>(sql: string, params: readonly unknown[] = []) =>
      (await client.query(text(sql), params as unknown[])).rows[0] as T | undefined,
    run: async (sql: string, params: readonly unknown[] = []) =>
      (await client.query(text(sql), params as unknown[])).rowCount ?? 0,
  };
}

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
  #listener: Promise<pg.Client> | undefined;
  readonly #handlers = new Map<Channel, Set<(payload: string) => void>>();

  constructor(options: PostgresOptions) {
    this.#schema = options.schema;
    this.#url = options.url;
    this.#pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize,
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

  async transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    const client = await this.#pool.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(executor(client));
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
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

  /** One dedicated connection LISTENs for every channel this process cares about. */
  #connectListener(): Promise<pg.Client> {
    this.#listener ??= (async () => {
      const client = new pg.Client({ connectionString: this.#url });
      client.on('notification', (message) => {
        const channel = [...this.#handlers.keys()].find((c) => this.#channel(c) === message.channel);
        for (const handler of channel ? (this.#handlers.get(channel) ?? []) : [])
          handler(message.payload ?? '');
      });
      // A lost listener connection is not fatal: workers fall back to their slow poll.
      client.on('error', () => {
        this.#listener = undefined;
      });
      await client.connect();
      return client;
    })();
    return this.#listener;
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

  /** Creates the configured schema when missing, so a fresh database needs no manual step. */
  async prepareDatabase(): Promise<void> {
    await this.#pool.query(`CREATE SCHEMA IF NOT EXISTS "${this.#schema}"`);
  }

  async ping(): Promise<void> {
    await this.#pool.query('SELECT 1');
  }

  async close(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    if (listener) await (await listener).end().catch(() => undefined);
    await this.#pool.end();
  }
}
