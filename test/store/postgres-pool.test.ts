import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import { caseTitle, freshStore, type StoreCase, storeCases } from '../helpers/stores.js';

const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;

/**
 * The PostgreSQL store keeps the connections it has opened through a quiet spell. pg-pool's default
 * closes one idle for 10 s, and the next burst of requests then waited for new backends, and for
 * every statement to be prepared again on them, before its first token.
 */
describe.skipIf(postgres.skip)(`the connection pool: ${caseTitle(postgres)}`, () => {
  let store: Store;
  let close: () => Promise<void>;

  beforeEach(async () => {
    ({ store, close } = await freshStore(postgres));
  });
  afterEach(async () => close());

  /** The backends that answer three statements run at once, each on a connection of its own. */
  const backends = async () => {
    const rows = await Promise.all(
      [1, 2, 3].map(() =>
        store.driver.get<{ pid: number }>('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)'),
      ),
    );
    return new Set(rows.map((row) => row?.pid));
  };

  it('a burst after 11 quiet seconds is served by the same backends as the one before', async () => {
    const before = await backends();
    expect(before.size).toBe(3);
    await new Promise((resolve) => setTimeout(resolve, 11_000));
    expect(await backends()).toEqual(before);
  }, 20_000);
});
