import { EventEmitter } from 'node:events';
import { chmodSync, closeSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { timeStoreQuery } from '../../metrics/store.js';
import type { Channel, Dialect, SqlDriver, SqlExecutor } from '../driver.js';
import {
  CHECKPOINT_DEFAULTS,
  type Checkpointer,
  type CheckpointSettings,
  startCheckpointer,
} from './checkpointer.js';

interface GroupUnit {
  fn: (tx: SqlExecutor) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

const dialect: Dialect = {
  name: 'sqlite',
  binaryCollation: 'COLLATE BINARY',
  migrationLock: undefined,
  // One connection writes at a time (BEGIN IMMEDIATE), so a claim can never race another.
  skipLocked: '',
  scopeLock: undefined,
  sharedAcrossProcesses: false,
};

/**
 * The database holds webhook secrets and the file-URL signing key, so it is readable by its owner
 * only, whatever the umask: created 0600 (SQLite gives its -wal and -shm files the database's
 * mode), and an existing one, with any journal left beside it, tightened to 0600. A directory
 * Kiln has to create for it is 0700.
 */
function ownerOnly(file: string): void {
  mkdirSync(path.dirname(path.resolve(file)), { recursive: true, mode: 0o700 });
  closeSync(openSync(file, 'a', 0o600));
  for (const companion of [file, `${file}-wal`, `${file}-shm`, `${file}-journal`]) {
    try {
      chmodSync(companion, 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/**
 * better-sqlite3 is synchronous and holds one connection, so a transaction that awaits must not
 * let other callers' statements run inside it: while one is open, everything else queues behind it.
 */
export class SqliteDriver implements SqlDriver {
  readonly dialect = dialect;
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Database.Statement>();
  #queue: Promise<unknown> = Promise.resolve();
  #inTransaction = false;
  #checkpointer: Checkpointer | undefined;
  readonly #group: GroupUnit[] = [];
  #version: number | undefined;
  /** SQLite's store belongs to one process, so its notifications never need to leave it. */
  readonly #events = new EventEmitter().setMaxListeners(0);
  readonly #dataVersion: Database.Statement;

  constructor(file: string, checkpoints: CheckpointSettings = CHECKPOINT_DEFAULTS) {
    if (file !== ':memory:') ownerOnly(file);
    this.#db = new Database(file);
    this.#db.pragma('journal_mode = WAL');
    this.#db.pragma('busy_timeout = 5000');
    this.#db.pragma('foreign_keys = ON');
    this.#db.pragma('synchronous = NORMAL');
    this.#dataVersion = this.#db.prepare('PRAGMA data_version').pluck();
    if (file !== ':memory:') {
      // Checkpoints happen on a thread of their own, never inside a request's COMMIT.
      this.#db.pragma('wal_autocheckpoint = 0');
      this.#checkpointer = startCheckpointer(file, checkpoints);
    }
  }

  #prepare(sql: string): Database.Statement {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  /** Each statement is timed as it runs: waiting behind a transaction counts as the transaction's time. */
  readonly #direct: SqlExecutor = {
    all: async <T>(sql: string, params: readonly unknown[] = []) =>
      timeStoreQuery('all', () => this.#prepare(sql).all(...params) as T[]),
    get: async <T>(sql: string, params: readonly unknown[] = []) =>
      timeStoreQuery('get', () => this.#prepare(sql).get(...params) as T | undefined),
    run: async (sql: string, params: readonly unknown[] = []) =>
      timeStoreQuery('run', () => this.#prepare(sql).run(...params).changes),
  };

  /** Runs at once when no transaction is open, otherwise after it. */
  #when<T>(work: () => Promise<T>): Promise<T> {
    if (!this.#inTransaction) return work();
    const next = this.#queue.then(work, work);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  all<T>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    return this.#when(() => this.#direct.all<T>(sql, params));
  }

  get<T>(sql: string, params?: readonly unknown[]): Promise<T | undefined> {
    return this.#when(() => this.#direct.get<T>(sql, params));
  }

  run(sql: string, params?: readonly unknown[]): Promise<number> {
    return this.#when(() => this.#direct.run(sql, params));
  }

  /**
   * Group commit: transactions asked for in the same turn of the event loop run in one SQLite
   * transaction and all resolve only once the shared COMMIT is done. Under load this turns many
   * commits into one. Should any unit fail, the group rolls back and each unit runs again in a
   * transaction of its own, so only the failing one fails — as on PostgreSQL, and without the two
   * statements a savepoint per unit would cost every transaction in the common case.
   */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#group.push({ fn, resolve, reject } as GroupUnit);
      if (this.#group.length === 1) this.#nextGroup();
    });
  }

  /** Commits what is waiting, at most MAX_GROUP_UNITS at a time, on the next turn of the event loop. */
  #nextGroup(): void {
    setImmediate(() => {
      const units = this.#group.splice(0, MAX_GROUP_UNITS);
      if (this.#group.length > 0) this.#nextGroup();
      const work = () => this.#commitGroup(units);
      const next = this.#queue.then(work, work);
      this.#queue = next.catch(() => undefined);
    });
  }

  async #commitGroup(units: GroupUnit[]): Promise<void> {
    if (units.length > 1 && (await this.#commitTogether(units))) return;
    for (const unit of units) await this.#commitTogether([unit], true);
  }

  /**
   * The units in one transaction, answered once it commits. False, with nothing written and no unit
   * answered, when one of several fails; a unit alone (`answerFailure`) is answered its failure.
   */
  async #commitTogether(units: GroupUnit[], answerFailure = false): Promise<boolean> {
    const values: unknown[] = [];
    this.#inTransaction = true;
    try {
      this.#prepare('BEGIN IMMEDIATE').run();
      for (const unit of units) values.push(await unit.fn(this.#direct));
      this.#prepare('COMMIT').run();
    } catch (error) {
      // A failing statement may have ended the transaction itself (SQLITE_FULL, SQLITE_IOERR).
      if (this.#db.inTransaction) this.#prepare('ROLLBACK').run();
      if (answerFailure) for (const unit of units) unit.reject(error);
      return false;
    } finally {
      this.#inTransaction = false;
    }
    units.forEach((unit, i) => {
      unit.resolve(values[i]);
    });
    return true;
  }

  /** Read once per turn of the event loop: requests handled in the same turn share the reading. */
  externalVersion(): number {
    if (this.#version === undefined) {
      this.#version = this.#dataVersion.get() as number;
      setImmediate(() => {
        this.#version = undefined;
      });
    }
    return this.#version;
  }

  async exec(script: string): Promise<void> {
    await this.#when(async () => this.#db.exec(script));
  }

  async notify(channel: Channel, payload: string): Promise<void> {
    this.#events.emit(channel, payload);
  }

  async listen(channel: Channel, handler: (payload: string) => void): Promise<() => Promise<void>> {
    this.#events.on(channel, handler);
    return async () => {
      this.#events.off(channel, handler);
    };
  }

  async prepareDatabase(): Promise<void> {}

  /** How many times the checkpointer started the WAL over under load (0 for an in-memory database). */
  get walRestarts(): number {
    return this.#checkpointer?.restarts ?? 0;
  }

  async ping(): Promise<void> {
    await this.get('SELECT 1');
  }

  async close(): Promise<void> {
    await this.#queue;
    await this.#checkpointer?.stop();
    this.#db.close();
  }
}

/**
 * Units in one commit group. A group runs without yielding to I/O (better-sqlite3 is synchronous),
 * so a large one would stall every stream this process relays: 256 jobs ending together held the
 * event loop for about 15 ms. The rest waits for the next turn of the event loop.
 */
const MAX_GROUP_UNITS = 32;

/** Pages per backup step: all of them, so that one step, in one read transaction, copies one snapshot. */
const WHOLE_DATABASE = 0x7fffffff;

/**
 * Copies the store at `source` into `dest` (a new file, created owner-only) with SQLite's online
 * backup, while gateways keep reading and writing it. The copy is taken in a single backup step:
 * in WAL mode that step's read transaction sees one committed state and blocks no writer, whereas
 * small steps restart from scratch whenever another process commits between them.
 */
export async function backupSqliteStore(source: string, dest: string): Promise<void> {
  closeSync(openSync(dest, 'wx', 0o600));
  // Read-write, not readonly: a read-only connection to a store nobody has open would leave an
  // empty -wal and -shm behind it; this one, the last to close, removes them as `kiln serve` does.
  const db = new Database(source, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    await db.backup(dest, { progress: () => WHOLE_DATABASE });
  } finally {
    db.close();
  }
}

/** What a database file that should hold a Kiln store was found to hold. */
export type StoreFileCheck =
  | { ok: true; schemaVersion: number }
  | { ok: false; problem: 'not-sqlite' | 'not-kiln' | 'damaged'; details: string[] };

/**
 * Checks a file no gateway has open (a backup being written or restored): an SQLite database that
 * passes `integrity_check` and has Kiln's migrations table. A sound one is left a single file in
 * rollback-journal mode, with nothing beside it, which `kiln serve` turns back to WAL on opening.
 */
export function checkStoreFile(file: string): StoreFileCheck {
  const db = new Database(file, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    let found: string[];
    try {
      found = db.prepare('PRAGMA integrity_check').pluck().all() as string[];
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === 'SQLITE_NOTADB') return { ok: false, problem: 'not-sqlite', details: [] };
      if (code === 'SQLITE_CORRUPT')
        return { ok: false, problem: 'damaged', details: [(error as Error).message] };
      throw error;
    }
    if (found.length !== 1 || found[0] !== 'ok') return { ok: false, problem: 'damaged', details: found };
    const hasMigrations = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kiln_migrations'")
      .get();
    if (!hasMigrations) return { ok: false, problem: 'not-kiln', details: [] };
    const version = db
      .prepare('SELECT COALESCE(MAX(version), 0) FROM kiln_migrations')
      .pluck()
      .get() as number;
    db.pragma('journal_mode = DELETE');
    return { ok: true, schemaVersion: version };
  } finally {
    db.close();
  }
}

/**
 * Whether another connection — a gateway, a worker, `kiln migrate` — has the database open: in
 * WAL mode each holds a shared lock on the file for as long as it is open, so an exclusive lock
 * cannot be had at once.
 */
export function sqliteStoreInUse(file: string): boolean {
  const db = new Database(file, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE; COMMIT');
    return false;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') return true;
    // Not a database at all (or a damaged one): no gateway can be serving it.
    return false;
  } finally {
    db.close();
  }
}
