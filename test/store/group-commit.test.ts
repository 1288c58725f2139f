import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Repositories, type Store } from '../../src/store/index.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Both stores commit transactions asked for together as one group. What callers must not notice:
 * each transaction still commits or fails on its own — a failing one, whether its code throws or
 * its SQL is refused, rejects with its own error and leaves nothing behind, every other one
 * resolves with its own value once its rows are visible to other connections, and nothing is
 * written twice.
 */

class UnitFailure extends Error {
  constructor(readonly unit: number) {
    super(`unit ${unit} gives up`);
  }
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`group commit: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    /** A second connection (SQLite) or pool (PostgreSQL) on the same database, as another process has. */
    let observer: Store;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      const fresh = storeCase.fresh();
      store = openStore(fresh.store);
      await store.migrate();
      observer = openStore({ ...fresh.store, pool_size: 2 });
      cleanup = fresh.cleanup;
    });
    afterEach(async () => {
      await store.close();
      await observer.close();
      await cleanup();
    });

    /**
     * One unit's work: an organisation named `name` and an API key labelled `name` in it, with a
     * fresh random hash, so that running the unit twice would leave two keys with that label.
     */
    async function insertPair(tx: Repositories, name: string): Promise<string> {
      const org = await tx.orgs.create(name);
      if (!org) throw new Error(`organisation ${name} exists already`);
      const key = await tx.keys.create({
        orgId: org.id,
        hash: randomBytes(32).toString('hex'),
        prefix: 'kiln_sk_test',
        name,
        tier: 'standard',
        role: 'member',
      });
      return `${org.id}/${key.id}`;
    }

    /** What the observer sees of `name`: the organisation's id and the ids of keys labelled `name`. */
    async function seen(name: string): Promise<{ org: string | undefined; keys: string[] }> {
      const org = await observer.orgs.byName(name);
      const keys = await observer.driver.all<{ id: string }>(
        'SELECT id FROM api_keys WHERE name = ? ORDER BY id',
        [name],
      );
      return { org: org?.id, keys: keys.map((k) => k.id) };
    }

    it('50 at once that all succeed: each resolves with its own value once its rows are visible', async () => {
      const visibleAtResolve = new Map<number, { org: string | undefined; keys: string[] }>();
      const values = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          store
            .transaction(async (tx) => {
              if (i % 10 === 5) await sleep(5);
              return insertPair(tx, `ok-${i}`);
            })
            .then(async (ids) => {
              visibleAtResolve.set(i, await seen(`ok-${i}`));
              return ids;
            }),
        ),
      );
      for (const [i, ids] of values.entries()) {
        const [orgId, keyId] = ids.split('/');
        expect(visibleAtResolve.get(i), `ok-${i}`).toEqual({ org: orgId, keys: [keyId] });
      }
      expect(new Set(values).size).toBe(50);
      expect(await observer.orgs.count()).toBe(50);
    });

    it('50 at once, a few of which throw: each settles on its own, visibly, once', async () => {
      const failing = new Set([0, 7, 8, 23, 49]);
      const visibleAtResolve = new Map<number, { org: string | undefined; keys: string[] }>();
      const outcomes = await Promise.allSettled(
        Array.from({ length: 50 }, (_, i) =>
          store
            .transaction(async (tx) => {
              const ids = await insertPair(tx, `unit-${i}`);
              if (i % 10 === 5) await sleep(5); // some units take a while, holding the group open
              if (failing.has(i)) throw new UnitFailure(i);
              return ids;
            })
            .then(async (ids) => {
              // Resolved means committed: another connection sees the rows at once.
              visibleAtResolve.set(i, await seen(`unit-${i}`));
              return ids;
            }),
        ),
      );

      for (const [i, outcome] of outcomes.entries()) {
        const name = `unit-${i}`;
        if (failing.has(i)) {
          expect(outcome.status, name).toBe('rejected');
          const reason = (outcome as PromiseRejectedResult).reason;
          expect(reason, name).toBeInstanceOf(UnitFailure);
          expect((reason as UnitFailure).unit, name).toBe(i);
          expect(await seen(name), name).toEqual({ org: undefined, keys: [] });
        } else {
          expect(outcome.status, name).toBe('fulfilled');
          const [orgId, keyId] = (outcome as PromiseFulfilledResult<string>).value.split('/');
          // Its own value, and exactly its own rows.
          expect(visibleAtResolve.get(i), name).toEqual({ org: orgId, keys: [keyId] });
          expect(await seen(name), name).toEqual({ org: orgId, keys: [keyId] });
        }
      }
      expect(await observer.orgs.count()).toBe(50 - failing.size);
      const keys = await observer.driver.get<{ n: number | string }>('SELECT COUNT(*) AS n FROM api_keys');
      expect(Number(keys?.n)).toBe(50 - failing.size);
    });

    it('a unit whose SQL is refused (a unique violation) fails alone; its earlier rows go with it', async () => {
      const taken = randomBytes(32).toString('hex');
      const owner = (await store.orgs.create('owner')) as { id: string };
      await store.keys.create({
        orgId: owner.id,
        hash: taken,
        prefix: 'kiln_sk_test',
        name: 'taken',
        tier: 'standard',
        role: 'member',
      });

      const BAD = 13;
      const outcomes = await Promise.allSettled(
        Array.from({ length: 30 }, (_, i) =>
          store.transaction(async (tx) => {
            if (i !== BAD) return insertPair(tx, `unit-${i}`);
            // An organisation first, then a key whose hash another key already has.
            const org = (await tx.orgs.create('doomed')) as { id: string };
            await tx.keys.create({
              orgId: org.id,
              hash: taken,
              prefix: 'kiln_sk_test',
              name: 'duplicate',
              tier: 'standard',
              role: 'member',
            });
            return 'should not commit';
          }),
        ),
      );

      const bad = outcomes[BAD] as PromiseSettledResult<string>;
      expect(bad.status).toBe('rejected');
      const error = (bad as PromiseRejectedResult).reason as Error & { code?: string };
      // The database's own error, as a transaction of its own would have got it.
      expect(error.message).toMatch(/unique/i);
      expect(error.code).toBe(storeCase.name === 'postgres' ? '23505' : 'SQLITE_CONSTRAINT_UNIQUE');
      expect(await seen('doomed')).toEqual({ org: undefined, keys: [] });
      expect(await seen('duplicate')).toEqual({ org: undefined, keys: [] });

      for (const [i, outcome] of outcomes.entries()) {
        if (i === BAD) continue;
        expect(outcome.status, `unit-${i}`).toBe('fulfilled');
        const [orgId, keyId] = (outcome as PromiseFulfilledResult<string>).value.split('/');
        expect(await seen(`unit-${i}`), `unit-${i}`).toEqual({ org: orgId, keys: [keyId] });
      }
      expect(await observer.orgs.count()).toBe(1 + 29);
    });

    it('transactions asked for while a group commits: later waves settle on their own too', async () => {
      // Five waves, a turn apart, so that later ones are asked for while earlier groups run.
      const outcomes: Array<Promise<PromiseSettledResult<string>>> = [];
      const fails = (i: number) => i % 9 === 4;
      for (let wave = 0; wave < 5; wave++) {
        for (let j = 0; j < 12; j++) {
          const i = wave * 12 + j;
          const done = store.transaction(async (tx) => {
            const ids = await insertPair(tx, `w-${i}`);
            if (fails(i)) throw new UnitFailure(i);
            return ids;
          });
          outcomes.push(
            done.then(
              (value) => ({ status: 'fulfilled', value }),
              (reason: unknown) => ({ status: 'rejected', reason }),
            ),
          );
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      const settled = await Promise.all(outcomes);
      let committed = 0;
      for (const [i, outcome] of settled.entries()) {
        if (fails(i)) {
          expect(outcome.status, `w-${i}`).toBe('rejected');
          expect(((outcome as PromiseRejectedResult).reason as UnitFailure).unit).toBe(i);
          expect(await seen(`w-${i}`)).toEqual({ org: undefined, keys: [] });
        } else {
          committed++;
          expect(outcome.status, `w-${i}`).toBe('fulfilled');
          const [orgId, keyId] = (outcome as PromiseFulfilledResult<string>).value.split('/');
          expect(await seen(`w-${i}`), `w-${i}`).toEqual({ org: orgId, keys: [keyId] });
        }
      }
      expect(await observer.orgs.count()).toBe(committed);
    });

    /** 40 one-statement transactions at once: inserts of `name(i)`, and every 10th a read instead. */
    function oneStatementWave(name: (i: number) => string) {
      const single = { oneStatement: true };
      return Promise.allSettled(
        Array.from({ length: 40 }, (_, i) => {
          if (i % 10 === 3)
            return store.driver.transaction(
              (tx) => tx.get<{ value: string }>('SELECT value FROM settings WHERE name = ?', ['read-me']),
              single,
            );
          return store.driver
            .transaction(
              (tx) => tx.run('INSERT INTO settings (name, value) VALUES (?, ?)', [name(i), `v${i}`]),
              single,
            )
            .then(async (changed) => {
              // Resolved means committed: another connection sees the row at once.
              const row = await observer.driver.get<{ value: string }>(
                'SELECT value FROM settings WHERE name = ?',
                [name(i)],
              );
              return { changed, seen: row?.value };
            });
        }),
      );
    }

    it('one-statement transactions at once (inserts merged on PostgreSQL): each answers its own statement once committed', async () => {
      await store.driver.run('INSERT INTO settings (name, value) VALUES (?, ?)', ['read-me', 'r']);
      const outcomes = await oneStatementWave((i) => `one-${i}`);
      for (const [i, outcome] of outcomes.entries()) {
        if (i % 10 === 3)
          expect(outcome, `unit ${i}`).toEqual({ status: 'fulfilled', value: { value: 'r' } });
        else
          expect(outcome, `unit ${i}`).toEqual({ status: 'fulfilled', value: { changed: 1, seen: `v${i}` } });
      }
      const rows = await observer.driver.all("SELECT name FROM settings WHERE name LIKE 'one-%'");
      expect(rows).toHaveLength(36);
    });

    it('one-statement transactions at once, two of which insert a name that exists: only those fail, the rest commit once', async () => {
      await store.driver.run('INSERT INTO settings (name, value) VALUES (?, ?)', ['read-me', 'r']);
      await store.driver.run('INSERT INTO settings (name, value) VALUES (?, ?)', ['taken', 'before']);
      const taken = (i: number) => i === 7 || i === 31;
      const outcomes = await oneStatementWave((i) => (taken(i) ? 'taken' : `two-${i}`));
      for (const [i, outcome] of outcomes.entries()) {
        if (i % 10 === 3)
          expect(outcome, `unit ${i}`).toEqual({ status: 'fulfilled', value: { value: 'r' } });
        else if (taken(i)) expect(outcome.status, `unit ${i}`).toBe('rejected');
        else
          expect(outcome, `unit ${i}`).toEqual({ status: 'fulfilled', value: { changed: 1, seen: `v${i}` } });
      }
      const rows = await observer.driver.all("SELECT name FROM settings WHERE name LIKE 'two-%'");
      expect(rows).toHaveLength(34);
      expect(await observer.driver.get('SELECT value FROM settings WHERE name = ?', ['taken'])).toEqual({
        value: 'before',
      });
      // The connections that carried the failed group (PostgreSQL writes a group's statements in one
      // go, so those behind the failure were refused too) serve the next wave as usual.
      const again = await oneStatementWave((i) => `again-${i}`);
      expect(again.filter((outcome) => outcome.status === 'rejected')).toEqual([]);
      expect(await observer.driver.all("SELECT name FROM settings WHERE name LIKE 'again-%'")).toHaveLength(
        36,
      );
    });

    it('a transaction alone that fails leaves nothing, and the next one commits', async () => {
      await expect(
        store.transaction(async (tx) => {
          await insertPair(tx, 'alone');
          throw new UnitFailure(1);
        }),
      ).rejects.toBeInstanceOf(UnitFailure);
      expect(await seen('alone')).toEqual({ org: undefined, keys: [] });
      const ids = await store.transaction((tx) => insertPair(tx, 'alone'));
      const [orgId, keyId] = ids.split('/');
      expect(await seen('alone')).toEqual({ org: orgId, keys: [keyId] });
    });
  });
}
