import { KeyCache } from '../auth/cache.js';
import type { Config } from '../config/schema.js';
import { timeStoreOperation } from '../metrics/store.js';
import type { SqlDriver, SqlExecutor, TransactionOptions } from './driver.js';
import { migrate } from './migrations.js';
import { PostgresDriver } from './postgres/driver.js';
import { AdmissionRepository } from './repos/admissions.js';
import { ContextRepository } from './repos/contexts.js';
import { FileRepository } from './repos/files.js';
import { IdempotencyRepository } from './repos/idempotency.js';
import { JobRepository } from './repos/jobs.js';
import { KeyRepository } from './repos/keys.js';
import { OrgRepository } from './repos/orgs.js';
import { ResponseEventRepository } from './repos/response-events.js';
import { RetentionRepository } from './repos/retention.js';
import { SettingsRepository } from './repos/settings.js';
import { UsageRepository } from './repos/usage.js';
import { WebhookRepository } from './repos/webhooks.js';
import { SqliteDriver } from './sqlite/driver.js';

export type { Channel, SqlDriver } from './driver.js';
export type { FinishGuard } from './repos/jobs.js';
export type { PublishedEvent, ResponseEvent } from './repos/response-events.js';
export * from './types.js';

/** Every repository, over the database or over one transaction of it. */
export class Repositories {
  readonly orgs: OrgRepository;
  readonly keys: KeyRepository;
  readonly contexts: ContextRepository;
  readonly jobs: JobRepository;
  readonly usage: UsageRepository;
  readonly idempotency: IdempotencyRepository;
  readonly webhooks: WebhookRepository;
  readonly files: FileRepository;
  readonly settings: SettingsRepository;
  readonly responseEvents: ResponseEventRepository;
  readonly admissions: AdmissionRepository;
  readonly retention: RetentionRepository;

  constructor(db: SqlExecutor, dialect: SqlDriver['dialect'], onRevoke?: () => Promise<void>) {
    this.orgs = new OrgRepository(db, onRevoke);
    this.keys = new KeyRepository(db, onRevoke);
    this.contexts = new ContextRepository(db);
    this.jobs = new JobRepository(db, dialect);
    this.usage = new UsageRepository(db);
    this.idempotency = new IdempotencyRepository(db);
    this.webhooks = new WebhookRepository(db, dialect);
    this.files = new FileRepository(db);
    this.settings = new SettingsRepository(db);
    this.responseEvents = new ResponseEventRepository(db);
    this.admissions = new AdmissionRepository(db, dialect.scopeLock);
    this.retention = new RetentionRepository(db);
  }
}

/** Kiln's persistent state behind one async interface, whatever database holds it. */
export class Store extends Repositories {
  /** Live API keys by hash, emptied the moment a key is revoked (see KeyCache). */
  readonly liveKeys: KeyCache;

  readonly #onRevoke: () => Promise<void>;

  constructor(readonly driver: SqlDriver) {
    const onRevoke = async () => {
      this.liveKeys.clear();
      await driver.notify('kiln_keys', '');
    };
    super(driver, driver.dialect, onRevoke);
    this.#onRevoke = onRevoke;
    this.liveKeys = new KeyCache(driver, (hash) => this.keys.findActiveByHash(hash));
  }

  get dialect(): SqlDriver['dialect']['name'] {
    return this.driver.dialect.name;
  }

  /** Runs `fn` with repositories bound to one transaction: all of it commits, or none. */
  transaction<T>(fn: (tx: Repositories) => Promise<T>, options?: TransactionOptions): Promise<T> {
    return timeStoreOperation('transaction', () =>
      this.driver.transaction((tx) => fn(new Repositories(tx, this.driver.dialect, this.#onRevoke)), options),
    );
  }

  /** Whether this database holds a Kiln store already (its migrations table exists). */
  async exists(): Promise<boolean> {
    try {
      await this.driver.get('SELECT version FROM kiln_migrations LIMIT 1');
      return true;
    } catch {
      return false;
    }
  }

  migrate(): Promise<number> {
    return migrate(this.driver);
  }

  /** The newest migration this store has applied (0 for none). */
  async schemaVersion(): Promise<number> {
    const row = await this.driver.get<{ version: number | string | null }>(
      'SELECT MAX(version) AS version FROM kiln_migrations',
    );
    return Number(row?.version ?? 0);
  }

  ping(): Promise<void> {
    return this.driver.ping();
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}

/** Opens the store `store.url` names: `sqlite:<path>` or `postgres://…`. */
export function openStore(store: Config['store']): Store {
  if (store.url.startsWith('sqlite:')) return new Store(new SqliteDriver(store.url.slice('sqlite:'.length)));
  return new Store(new PostgresDriver({ url: store.url, schema: store.schema, poolSize: store.pool_size }));
}
