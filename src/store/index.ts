import type { Config } from '../config/schema.js';
import type { SqlDriver } from './driver.js';
import { migrate } from './migrations.js';
import { PostgresDriver } from './postgres/driver.js';
import { ContextRepository } from './repos/contexts.js';
import { KeyRepository } from './repos/keys.js';
import { OrgRepository } from './repos/orgs.js';
import { SqliteDriver } from './sqlite/driver.js';

export type { SqlDriver } from './driver.js';
export * from './types.js';

/** Kiln's persistent state behind one async interface, whatever database holds it. */
export class Store {
  readonly orgs: OrgRepository;
  readonly keys: KeyRepository;
  readonly contexts: ContextRepository;

  constructor(readonly driver: SqlDriver) {
    this.orgs = new OrgRepository(driver);
    this.keys = new KeyRepository(driver);
    this.contexts = new ContextRepository(driver);
  }

  get dialect(): SqlDriver['dialect']['name'] {
    return this.driver.dialect.name;
  }

  migrate(): Promise<number> {
    return migrate(this.driver);
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
