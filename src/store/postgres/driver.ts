import pg from 'pg';
import type { Dialect, SqlDriver, SqlExecutor } from '../driver.js';

const dialect: Dialect = {
  name: 'postgres',
  binaryCollation: 'COLLATE "C"',
  // Any constant works; it only has to be the same in every Kiln process.
  migrationLock: 'SELECT pg_advisory_xact_lock(4242100)',
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

  constructor(options: PostgresOptions) {
    this.#schema = options.schema;
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

  /** Creates the configured schema when missing, so a fresh database needs no manual step. */
  async prepareDatabase(): Promise<void> {
    await this.#pool.query(`CREATE SCHEMA IF NOT EXISTS "${this.#schema}"`);
  }

  async ping(): Promise<void> {
    await this.#pool.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
