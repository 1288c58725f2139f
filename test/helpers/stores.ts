import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openStore, type Store } from '../../src/store/index.js';
import { dropSchema, POSTGRES_URL, probePostgres, testSchema } from './postgres.js';
import { skipReason } from './skip-reporter.js';

/** One store implementation the contract tests run against. */
export interface StoreCase {
  name: 'sqlite' | 'postgres';
  skip: string | undefined;
  /** `store.*` config for a fresh, empty store; `cleanup` removes every trace of it. */
  fresh(): { store: Config['store']; cleanup(): Promise<void> };
}

type Config = import('../../src/config/schema.js').Config;

const pgProbe = await probePostgres();

export const storeCases: StoreCase[] = [
  {
    name: 'sqlite',
    skip: undefined,
    fresh() {
      const dir = mkdtempSync(path.join(tmpdir(), 'kiln-test-'));
      return {
        store: { url: `sqlite:${path.join(dir, 'kiln.db')}`, schema: 'public', pool_size: 5 },
        cleanup: async () => rmSync(dir, { recursive: true, force: true }),
      };
    },
  },
  {
    name: 'postgres',
    /** Read by a test deciding whether to run, so that is when the reason is recorded for the run's summary. */
    get skip() {
      return pgProbe.available ? undefined : skipReason(pgProbe.reason, 'KILN_REQUIRE_POSTGRES');
    },
    fresh() {
      const schema = testSchema();
      return { store: { url: POSTGRES_URL, schema, pool_size: 5 }, cleanup: () => dropSchema(schema) };
    },
  },
];

/** Opens and migrates a fresh store of the case; `close` also removes it. */
export async function freshStore(c: StoreCase): Promise<{ store: Store; close(): Promise<void> }> {
  const { store: config, cleanup } = c.fresh();
  const store = openStore(config);
  await store.migrate();
  return {
    store,
    close: async () => {
      await store.close();
      await cleanup();
    },
  };
}

/** `describe` title for a case, carrying the skip reason where there is one. */
export const caseTitle = (c: StoreCase) => (c.skip ? `${c.name} (skipped: ${c.skip})` : c.name);
