import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey, issueKey, KEY_PREFIX } from '../../src/auth/keys.js';
import { randomBase62 } from '../../src/ids.js';
import { openStore, type Store } from '../../src/store/index.js';
import type { ApiKey } from '../../src/store/types.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Live API keys are cached by the gateway, so an authenticated request costs no store lookup. What
 * a user must never notice: a revoked key that still works (whoever revoked it, from whichever
 * process), or a key that starts to work late because its earlier "unknown" was remembered.
 */

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`API key cache: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let store: Store;

    beforeAll(async () => {
      kiln = await startTestServer(storeCase);
      store = kiln.server.store;
    });
    afterAll(async () => kiln?.close());

    async function issue(orgName: string): Promise<{ key: string; record: ApiKey }> {
      const org = (await store.orgs.byName(orgName)) ?? (await store.orgs.create(orgName));
      if (!org) throw new Error(`no org ${orgName}`);
      return issueKey(store, { orgId: org.id });
    }

    /** An authenticated request with `key`: its status, and the error code of a refusal. */
    async function use(key: string): Promise<{ status: number; code: string | undefined }> {
      const { status, body } = await kiln.call('GET', '/api/v1/contexts', { key });
      return { status, code: body?.error?.code };
    }

    /**
     * Uses the key until the gateway answers it from its cache: a revocation written behind the
     * store's back (plain SQL on the gateway's own connection, which nothing reports) does not
     * change the answer. The revocation tests below are only meaningful on a cached key.
     */
    async function untilCached(key: string, id: string): Promise<void> {
      await waitUntil(
        async () => {
          // A plain use, which caches the key once the gateway can hear revocations.
          expect(await use(key)).toEqual({ status: 200, code: undefined });
          await store.driver.run('UPDATE api_keys SET revoked_at = ? WHERE id = ?', [Date.now(), id]);
          const { status } = await use(key);
          await store.driver.run('UPDATE api_keys SET revoked_at = NULL WHERE id = ?', [id]);
          return status === 200;
        },
        { timeoutMs: 5000, intervalMs: 20, describe: () => `key ${id} served from the cache` },
      );
    }

    it('a cached key revoked through the gateway’s own store is refused on the very next request', async () => {
      const { key, record } = await issue('acme');
      const { key: sibling, record: siblingRecord } = await issue('acme');
      await untilCached(key, record.id);
      await untilCached(sibling, siblingRecord.id);

      expect(await store.keys.revoke(record.id)).toBe(true);
      expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
      // And stays refused.
      for (let i = 0; i < 5; i++) expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
      // Another key of the same organisation goes on working.
      expect((await use(sibling)).status).toBe(200);
      // A second revocation of the same key changes nothing.
      expect(await store.keys.revoke(record.id)).toBe(false);
      expect((await use(key)).status).toBe(401);
    });

    it('a cached key revoked through another store on the same database is refused promptly', async () => {
      const { key, record } = await issue('initech');
      await untilCached(key, record.id);

      // What `kiln admin keys revoke` does: a store of its own (SQLite: a second connection to the
      // file; PostgreSQL: another pool on the same schema, as in another process).
      const other = openStore({ ...kiln.server.runtime.config.store, pool_size: 1 });
      try {
        expect(await other.keys.revoke(record.id)).toBe(true);
        const revokedAt = Date.now();
        if (storeCase.name === 'sqlite') {
          // Another connection committed: the very next request looks again.
          expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
        } else {
          // The other store's notification reaches the gateway within a second.
          await waitUntil(async () => (await use(key)).status === 401, {
            timeoutMs: 1000,
            intervalMs: 10,
            describe: () => 'a 401 for the key revoked through another store',
          });
          expect(Date.now() - revokedAt).toBeLessThan(1000);
        }
        for (let i = 0; i < 5; i++) expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
      } finally {
        await other.close();
      }
    });

    // PostgreSQL alone has a connection to lose: SQLite's notifications never leave the process.
    if (storeCase.name === 'postgres')
      it('with its listening connection lost, a revocation elsewhere still takes at once; listening comes back', async () => {
        const { key, record } = await issue('hooli');
        const { key: later, record: laterRecord } = await issue('hooli');
        await untilCached(key, record.id);
        await untilCached(later, laterRecord.id);
        const schema = kiln.server.runtime.config.store.schema;
        const admin = new pg.Client({ connectionString: POSTGRES_URL });
        await admin.connect();
        const listeners = () =>
          admin.query(
            `SELECT pid FROM pg_stat_activity WHERE query ILIKE 'LISTEN "kiln_%_${schema}"' AND pid <> pg_backend_pid()`,
          );
        const other = openStore({ ...kiln.server.runtime.config.store, pool_size: 1 });
        try {
          // The server ends the gateway's listening connection (a failover, a restart).
          const [listener] = (await listeners()).rows as Array<{ pid: number }>;
          expect(listener).toBeDefined();
          await admin.query('SELECT pg_terminate_backend($1)', [listener?.pid]);
          await waitUntil(() => kiln.server.store.driver.listenerUp?.() === false, {
            timeoutMs: 5000,
            describe: () => 'the gateway noticing its listener gone',
          });
          // While it is gone, a revocation through another store is not heard; the key is refused anyway.
          await other.keys.revoke(record.id);
          expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
          // It comes back by itself, and notifications are heard again: keys are cached, and a
          // revocation elsewhere reaches the gateway within a second, as before.
          await waitUntil(async () => (await listeners()).rows.length > 0, {
            timeoutMs: 10_000,
            describe: () => 'the gateway listening again',
          });
          await untilCached(later, laterRecord.id);
          await other.keys.revoke(laterRecord.id);
          await waitUntil(async () => (await use(later)).status === 401, {
            timeoutMs: 1000,
            intervalMs: 10,
            describe: () => 'a 401 for the key revoked through another store after the reconnection',
          });
        } finally {
          await other.close();
          await admin.end();
        }
      });

    it('an unknown key is refused every time, and works at once when it comes to exist', async () => {
      const key = `${KEY_PREFIX}${randomBase62(32)}`;
      for (let i = 0; i < 5; i++) expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });

      // Created with that very secret: a refusal was never remembered.
      const org = (await store.orgs.create('umbrella')) as { id: string };
      await store.keys.create({
        orgId: org.id,
        hash: hashKey(key),
        prefix: key.slice(0, KEY_PREFIX.length + 4),
        name: null,
        tier: 'standard',
        role: 'member',
      });
      expect((await use(key)).status).toBe(200);
    });

    it('a key revoked before it was ever used is refused, before and after a pause', async () => {
      const { key, record } = await issue('hooli');
      expect(await store.keys.revoke(record.id)).toBe(true);
      expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
      await sleep(50);
      expect(await use(key)).toEqual({ status: 401, code: 'unauthorized' });
    });

    it('requests racing a revocation: every request after it resolves is refused', async () => {
      const { key, record } = await issue('globex');
      await untilCached(key, record.id);
      // Requests in flight while the revocation commits may go either way; none after it may pass.
      const during = Array.from({ length: 20 }, () => use(key));
      await store.keys.revoke(record.id);
      await Promise.all(during);
      const after = await Promise.all(Array.from({ length: 20 }, () => use(key)));
      expect(after.map((a) => a.status)).toEqual(Array(20).fill(401));
    });
  });
}
