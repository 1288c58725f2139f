import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { KilnError } from '../../src/errors.js';
import { openStore } from '../../src/store/index.js';
import { kiln } from '../helpers/cli.js';
import { closedPort } from '../helpers/ports.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * A PostgreSQL store that cannot be opened says what was tried (host:port/database, never the
 * password), that the address comes from store.url / KILN_STORE_URL, and the driver's reason.
 */

const PASSWORD = 's3cret-Pa55';
const SOURCE = 'store.url (KILN_STORE_URL)';

/** The error opening and migrating a store at `url` fails with. */
async function openFailure(url: string): Promise<KilnError> {
  const store = openStore({ url, schema: 'kiln_connect_errors', pool_size: 1 });
  try {
    await store.migrate();
  } catch (error) {
    return error as KilnError;
  } finally {
    await store.close().catch(() => undefined);
  }
  throw new Error(`the store at ${url} opened`);
}

function expectNoPassword(text: string): void {
  expect(text).not.toContain(PASSWORD);
  expect(text).not.toContain(encodeURIComponent(PASSWORD));
}

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('PostgreSQL store that cannot be opened', () => {
  it('nothing listening: names host:port/database and where the URL comes from, hides the password', async () => {
    const port = await closedPort();
    const error = await openFailure(`postgres://kiln:${PASSWORD}@127.0.0.1:${port}/x`);
    expect(error).toBeInstanceOf(KilnError);
    expect(error.code).toBe('store-unavailable');
    expect(error.message).toBe(
      `cannot open the PostgreSQL store at postgres://kiln:***@127.0.0.1:${port}/x (from ${SOURCE}): ` +
        `connect ECONNREFUSED 127.0.0.1:${port}; is PostgreSQL running and listening on that host and port?`,
    );
    // Nothing else carries the driver's error (which may hold the URL) into a log line.
    expect(error.cause).toBeUndefined();
    expectNoPassword(JSON.stringify(error, Object.getOwnPropertyNames(error)));
  });

  it('a URL that does not parse is not echoed (its password with it)', async () => {
    const error = await openFailure(`postgres://kiln:${PASSWORD}@[::1:5432/x`);
    expect(error.code).toBe('store-unavailable');
    expect(error.message).toContain(`${SOURCE} is not a valid postgres:// URL`);
    expectNoPassword(error.message);
  });

  it('kiln migrate and kiln serve print one line naming the store tried, without the password, and exit 1', async () => {
    const port = await closedPort();
    const cwd = mkdtempSync(path.join(tmpdir(), 'kiln-pg-errors-'));
    dirs.push(cwd);
    for (const command of ['migrate', 'serve']) {
      const result = await kiln([command], {
        cwd,
        env: {
          KILN_STORE_URL: `postgresql://kiln:${PASSWORD}@127.0.0.1:${port}/kiln`,
          KILN_DATA_DIR: cwd,
          KILN_PORT: '0',
          KILN_HOST: '127.0.0.1',
        },
      });
      expect(result.code, command).toBe(1);
      expect(result.stderr, command).toBe(
        `kiln: store-unavailable: cannot open the PostgreSQL store at postgresql://kiln:***@127.0.0.1:${port}/kiln ` +
          `(from ${SOURCE}): connect ECONNREFUSED 127.0.0.1:${port}; is PostgreSQL running and listening on that host and port?\n`,
      );
      // stdout carries `kiln serve`'s log lines: none may hold the password either.
      expectNoPassword(result.stdout + result.stderr);
    }
  });

  const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;
  describe.skipIf(postgres.skip)(`against the test server: ${caseTitle(postgres)}`, () => {
    it('a database that does not exist: the driver says so, with what to do', async () => {
      const url = new URL(POSTGRES_URL);
      url.pathname = `/kiln_no_such_db_${process.pid}`;
      const error = await openFailure(url.href);
      expect(error.code).toBe('store-unavailable');
      expect(error.message).toContain(
        `${url.hostname}:${url.port || 5432}/kiln_no_such_db_${process.pid} (from ${SOURCE})`,
      );
      expect(error.message).toContain(`database "kiln_no_such_db_${process.pid}" does not exist`);
      expect(error.message).toContain('create the database');
      if (url.password) expect(error.message).not.toContain(decodeURIComponent(url.password));
    });

    it('a user the server refuses: the driver says why, and the password stays out', async () => {
      const url = new URL(POSTGRES_URL);
      url.username = `kiln_no_such_role_${process.pid}`;
      url.password = PASSWORD;
      const error = await openFailure(url.href);
      expect(error.code).toBe('store-unavailable');
      expect(error.message).toContain(`postgres://kiln_no_such_role_${process.pid}:***@${url.hostname}`);
      expect(error.message).toContain(`(from ${SOURCE})`);
      // Unknown role (trust) or failed password (password auth): either way, the user to check.
      expect(error.message).toMatch(/role ".*" does not exist|password authentication failed/);
      expect(error.message).toContain('check the user name');
      expectNoPassword(error.message);
    });
  });
});
