import { chmodSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * kiln.db holds webhook secrets and the file-URL signing secret: the database and its WAL and
 * shared-memory files are readable by their owner only, whatever the umask.
 */

const mode = (file: string) => statSync(file).mode & 0o777;
const companions = (db: string) => [db, `${db}-wal`, `${db}-shm`];

describe('SQLite database files are private to their owner', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    // Last in, first out: a store closes before its directory goes.
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('a fresh store: kiln.db, kiln.db-wal and kiln.db-shm are 0600 under a loose umask', async () => {
    const umask = process.umask(0o000);
    let kiln: TestServer;
    try {
      kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0]);
    } finally {
      process.umask(umask);
    }
    cleanups.push(() => kiln.close());
    // Something written, so the WAL holds data (the signing secret is already in it).
    expect(
      (await kiln.call('POST', '/api/v1/contexts', { body: { name: 'secret', content: 's' } })).status,
    ).toBe(201);
    const file = kiln.server.runtime.config.store.url.slice('sqlite:'.length);
    for (const f of companions(file)) {
      expect(existsSync(f), f).toBe(true);
      expect(mode(f).toString(8), f).toBe('600');
    }
  });

  it('an existing database left world-readable is tightened, its WAL and shared memory too', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-modes-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'kiln.db');
    const first = openStore({ url: `sqlite:${file}`, schema: 'public', pool_size: 1 });
    await first.migrate();
    await first.close();
    // As an older Kiln (or a copy) would have left them, with a leftover WAL and shm beside.
    chmodSync(file, 0o644);
    writeFileSync(`${file}-wal`, '', { mode: 0o644 });
    writeFileSync(`${file}-shm`, '', { mode: 0o666 });
    chmodSync(`${file}-shm`, 0o666);

    const store = openStore({ url: `sqlite:${file}`, schema: 'public', pool_size: 1 });
    cleanups.push(() => store.close());
    await store.orgs.create('acme');
    for (const f of companions(file)) expect(mode(f).toString(8), f).toBe('600');
  });

  it('a data directory Kiln creates for the database is 0700', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-modes-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const umask = process.umask(0o022);
    try {
      const store = openStore({
        url: `sqlite:${path.join(dir, 'data', 'nested', 'kiln.db')}`,
        schema: 'public',
        pool_size: 1,
      });
      cleanups.push(() => store.close());
    } finally {
      process.umask(umask);
    }
    expect(mode(path.join(dir, 'data')).toString(8)).toBe('700');
    expect(mode(path.join(dir, 'data', 'nested')).toString(8)).toBe('700');
    // A directory that already exists is the operator's: its mode is left alone.
    chmodSync(dir, 0o755);
    await openStore({ url: `sqlite:${path.join(dir, 'other.db')}`, schema: 'public', pool_size: 1 }).close();
    expect(mode(dir).toString(8)).toBe('755');
  });
});
