/**
 * The little SQL surface every store implementation provides. Repositories are written once
 * against it with `?` placeholders; each driver adapts placeholders, locking and types.
 */
export interface SqlExecutor {
  all<T>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  get<T>(sql: string, params?: readonly unknown[]): Promise<T | undefined>;
  /** Runs a statement and answers how many rows it changed. */
  run(sql: string, params?: readonly unknown[]): Promise<number>;
}

/** What differs between databases, declared once per driver instead of tested for in the core. */
export interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  /** Column collation that orders text byte by byte (stable cursors on every database). */
  readonly binaryCollation: string;
  /** Statement taken inside the migration transaction so two processes never migrate at once. */
  readonly migrationLock: string | undefined;
  /**
   * Statement that serialises, until commit, the transactions admitting work for one caller (its one
   * parameter names them); undefined where writers are serial anyway.
   */
  readonly scopeLock: string | undefined;
  /** Suffix of a row-claiming SELECT: skip rows another transaction holds (empty where writers are serial). */
  readonly skipLocked: string;
  /** Whether other processes share the database (and so need notifications): PostgreSQL yes, SQLite no. */
  readonly sharedAcrossProcesses: boolean;
}

/** Channels processes use to wake each other (new work, finished jobs, cancellations, partial output) and to share what replicas cache. */
export type Channel = 'kiln_jobs' | 'kiln_job_events' | 'kiln_webhooks' | 'kiln_routing' | 'kiln_keys';

export interface TransactionOptions {
  alone?: boolean;
  oneStatement?: boolean;
}

export interface SqlDriver extends SqlExecutor {
  readonly dialect: Dialect;
  /**
   * Runs `fn` in one transaction; nothing else touches the database through this driver meanwhile.
   * `alone` keeps it out of group commit: a transaction that takes locks (`scopeLock`) must not
   * share one with others' work, whose locks could be taken in another order. `oneStatement` says
   * that `fn` issues a single statement, atomic on its own: a driver may run it without BEGIN and
   * COMMIT (PostgreSQL does, sparing two round trips; SQLite's group commit costs it less).
   * Both drivers commit transactions asked for together as one group, and when one of them fails,
   * run each again on its own: `fn` may run twice, so it must do nothing outside the transaction.
   */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(script: string): Promise<void>;
  /**
   * Publishes `payload` (at most a few KB) to every listener of `channel`, in every process sharing the
   * database (PostgreSQL NOTIFY) or in this process (SQLite, which one process owns).
   */
  notify(channel: Channel, payload: string): Promise<void>;
  /**
   * A number that moves whenever another connection — another process — has committed to the
   * database (SQLite's `data_version`, read at most once per turn of the event loop); absent where
   * other processes notify instead (PostgreSQL).
   */
  externalVersion?(): number;
  /** Subscribes to a channel; answers the function that unsubscribes. */
  listen(channel: Channel, handler: (payload: string) => void): Promise<() => Promise<void>>;
  /**
   * False while notifications cannot arrive (PostgreSQL: the listening connection was lost and is
   * being made again): what they would have told may have happened unheard. Undefined where
   * notifications never leave the process (SQLite).
   */
  listenerUp?(): boolean;
  /** Makes the database ready for migrations (PostgreSQL: creates the configured schema). */
  prepareDatabase(): Promise<void>;
  ping(): Promise<void>;
  close(): Promise<void>;
}
