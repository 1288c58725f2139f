import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Store } from '../../src/store/index.js';
import type { CheckpointSettings } from '../../src/store/sqlite/checkpointer.js';
import { SqliteDriver } from '../../src/store/sqlite/driver.js';

/**
 * SQLite's WAL under writes that never pause: a passive checkpoint cannot start the log over while
 * frames keep arriving, so without more the file grows for as long as the load lasts. The store
 * empties it once it passes a bound, and nothing written is lost on the way.
 */

const CONTENT_BYTES = 8 * 1024;
const WRITE_MS = 1500;
const WRITERS = 16;

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** Saves `content` as the organisation's context `name`. */
const saveContext = (store: Store, orgId: string, name: string, content: string) =>
  store.contexts.save({
    orgId,
    name,
    content,
    description: null,
    sizeBytes: content.length,
    sha256: sha256(content),
    createdBy: 'test',
  });

describe('SQLite WAL under steady writes', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** Saves contexts from WRITERS callers at once, with no pause, for WRITE_MS; answers what it wrote. */
  async function writeSteadily(checkpoints: CheckpointSettings) {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-wal-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'kiln.db');
    const driver = new SqliteDriver(file, checkpoints);
    const store = new Store(driver);
    cleanups.push(() => store.close());
    await store.migrate();
    const org = (await store.orgs.create('acme')) as { id: string };
    const written = new Map<string, string>();
    let largestWal = 0;
    const until = Date.now() + WRITE_MS;
    let n = 0;
    await Promise.all(
      Array.from({ length: WRITERS }, async () => {
        while (Date.now() < until) {
          const name = `blob-${n++}`;
          const content = `${name}:`.padEnd(CONTENT_BYTES, String.fromCharCode(97 + (n % 26)));
          await saveContext(store, org.id, name, content);
          written.set(name, sha256(content));
          largestWal = Math.max(largestWal, statSync(`${file}-wal`).size);
          // As requests arriving over sockets would: the event loop turns between saves.
          await new Promise((resolve) => setImmediate(resolve));
        }
      }),
    );
    return { file, store, driver, org, written, largestWal, wal: statSync(`${file}-wal`).size };
  }

  it('the log is started over once a pass leaves more than the bound in it, and nothing written is lost', async () => {
    // Without the bound: the log only grows while the writes last. What one save adds to it:
    const unbounded = await writeSteadily({
      everyMs: 50,
      restartFrames: Number.POSITIVE_INFINITY,
      tailFrames: 256,
      restartWaitMs: 100,
    });
    expect(unbounded.driver.walRestarts).toBe(0);
    expect(unbounded.wal).toBeGreaterThan(unbounded.written.size * CONTENT_BYTES);
    const perSave = unbounded.wal / unbounded.written.size;
    await unbounded.store.close();

    const run = await writeSteadily({ everyMs: 50, restartFrames: 256, tailFrames: 64, restartWaitMs: 100 });
    expect(run.written.size).toBeGreaterThan(1000);
    expect(run.driver.walRestarts).toBeGreaterThan(0);
    // The bound (1 MiB), plus what arrives between two passes and while one runs: a fraction of
    // what the same saves leave in a log that is never started over.
    expect(run.largestWal).toBeLessThan((perSave * run.written.size) / 2);

    // Every save is there, with its content, in this process and after a reopen.
    const check = async (store: Store) => {
      const row = await store.driver.get<{ n: number }>('SELECT COUNT(*) AS n FROM contexts');
      expect(row?.n).toBe(run.written.size);
      for (const [name, hash] of [...run.written].filter((_, i) => i % 97 === 0)) {
        const context = await store.contexts.get(run.org.id, name);
        expect(context && sha256(context.content), name).toBe(hash);
      }
    };
    await check(run.store);
    await run.store.close();
    const reopened = new Store(new SqliteDriver(run.file));
    cleanups.push(() => reopened.close());
    await check(reopened);
  });

  it('a reader holding a snapshot in another process does not hold up commits while the log is started over', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-wal-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'kiln.db');
    const driver = new SqliteDriver(file, {
      everyMs: 20,
      restartFrames: 64,
      tailFrames: 16,
      restartWaitMs: 100,
    });
    const store = new Store(driver);
    cleanups.push(() => store.close());
    await store.migrate();
    const org = (await store.orgs.create('acme')) as { id: string };
    const save = (name: string) => saveContext(store, org.id, name, name.padEnd(CONTENT_BYTES, 'x'));
    // As `kiln backup` or another tool would: a connection of its own, inside a read transaction.
    const reader = new Database(file, { readonly: true });
    cleanups.push(() => {
      reader.close();
    });
    reader.exec('BEGIN');
    reader.prepare('SELECT COUNT(*) FROM contexts').get();
    try {
      // Past the bound, so the checkpointer tries to start the log over while the reader holds it.
      for (let i = 0; i < 40; i++) await save(`before-${i}`);
      let slowest = 0;
      const until = Date.now() + 1500;
      for (let i = 0; Date.now() < until; i++) {
        const started = Date.now();
        await save(`during-${i}`);
        slowest = Math.max(slowest, Date.now() - started);
      }
      // A restart that waited for the reader with the writer's lock held would stall this commit for
      // the busy timeout (5 s), then fail it; the checkpointer gives up after 100 ms instead.
      expect(slowest).toBeLessThan(1000);
    } finally {
      reader.exec('COMMIT');
    }
    // Once the reader is gone, the log is started over (after 5 passes' pause, 0.1 s here).
    const until = Date.now() + 5000;
    for (let i = 0; driver.walRestarts === 0 && Date.now() < until; i++) {
      await save(`after-${i}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(driver.walRestarts).toBeGreaterThan(0);
  });
});
