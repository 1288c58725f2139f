import pg from 'pg';

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
