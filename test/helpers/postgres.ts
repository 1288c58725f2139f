import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { skipReason } from './skip-reporter.js';

export const POSTGRES_URL = process.env.KILN_TEST_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/test';
const required = process.env.KILN_REQUIRE_POSTGRES === '1';

/**
 * Whether PostgreSQL tests can run. Unreachable means skipped, with the reason in the test name and
 * the run's summary (stores.ts records it), unless KILN_REQUIRE_POSTGRES=1 (CI), where it is a failure instead.
 */
export async function probePostgres(): Promise<{ available: true } | { available: false; reason: string }> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return { available: true };
  } catch (error) {
    const reason = `PostgreSQL unreachable at ${POSTGRES_URL.replace(/\/\/[^@]*@/, '//')}: ${(error as Error).message}`;
    if (required) throw new Error(`KILN_REQUIRE_POSTGRES=1 but ${reason}`);
    return { available: false, reason };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A schema name of its own for each test run, so runs never see each other's rows. */
export function testSchema(): string {
  return `kiln_test_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
}

export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** PostgreSQL's client programs the printed backup and restore commands run. */
const CLIENT_TOOLS = ['psql', 'pg_dump', 'pg_restore'];

/**
 * Whether `kiln backup`'s printed commands can be run here: they need PostgreSQL's client tools
 * (Debian's postgresql-client; .ci/run installs it). Missing means skipped with the reason, unless
 * KILN_REQUIRE_POSTGRES=1, where it is a failure instead.
 */
export function probePostgresTools(): string | undefined {
  const missing = CLIENT_TOOLS.filter(
    (tool) => spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status !== 0,
  );
  if (missing.length === 0) return undefined;
  const reason = `the PostgreSQL backup test runs psql, pg_dump and pg_restore, and ${missing.join(', ')} is missing (Debian: sudo apt-get install postgresql-client)`;
  if (required) throw new Error(`KILN_REQUIRE_POSTGRES=1 but ${reason}`);
  return skipReason(reason, 'KILN_REQUIRE_POSTGRES');
}
