import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/keys.js';
import type { Store } from '../../src/store/index.js';
import { latestVersion } from '../../src/store/migrations.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

/** The store contract: every implementation must pass exactly this suite. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`store contract: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let orgA: string;
    let orgB: string;

    beforeEach(async () => {
      ({ store, close } = await freshStore(storeCase));
      orgA = (await store.orgs.create('acme'))?.id as string;
      orgB = (await store.orgs.create('globex'))?.id as string;
    });
    afterEach(async () => close());

    const save = (orgId: string, name: string, content: string, description: string | null = null) =>
      store.contexts.save({
        orgId,
        name,
        content,
        description,
        sizeBytes: Buffer.byteLength(content),
        sha256: 'x',
        createdBy: 'key_test',
      });

    it('migrations are recorded and running them again applies nothing', async () => {
      expect(await store.migrate()).toBe(0);
      const rows = await store.driver.all<{ version: number }>(
        'SELECT version FROM kiln_migrations ORDER BY version',
      );
      expect(rows.map((r) => r.version).at(-1)).toBe(latestVersion());
    });

    it('organisation names are unique', async () => {
      expect(await store.orgs.create('acme')).toBeUndefined();
      expect((await store.orgs.list()).map((o) => o.name)).toEqual(['acme', 'globex']);
      expect(await store.orgs.count()).toBe(2);
    });

    it('finds a key by hash until it is revoked', async () => {
      const { key, record } = await issueKey(store, {
        orgId: orgA,
        tier: 'free',
        role: 'admin',
        name: 'ops',
      });
      expect(key).toMatch(/^kiln_sk_[0-9A-Za-z]{32}$/);
      expect(record).toMatchObject({
        org_id: orgA,
        org_name: 'acme',
        tier: 'free',
        role: 'admin',
        name: 'ops',
        revoked_at: null,
      });
      const { hashKey } = await import('../../src/auth/keys.js');
      expect((await store.keys.findActiveByHash(hashKey(key)))?.id).toBe(record.id);
      expect(await store.keys.revoke(record.id)).toBe(true);
      expect(await store.keys.revoke(record.id)).toBe(false);
      expect(await store.keys.findActiveByHash(hashKey(key))).toBeUndefined();
      const listed = await store.keys.list(orgA);
      expect(listed).toHaveLength(1);
      expect(listed[0]?.revoked_at).toBeTypeOf('number');
    });

    it('never stores the key itself', async () => {
      const { key } = await issueKey(store, { orgId: orgA });
      const rows = await store.driver.all<Record<string, unknown>>('SELECT * FROM api_keys');
      expect(JSON.stringify(rows)).not.toContain(key);
      expect(JSON.stringify(rows)).not.toContain(key.slice(12));
    });

    it('saves a context, then replaces it by name with a new version', async () => {
      const first = await save(orgA, 'runbook', 'v1', 'how we deploy');
      expect(first.created).toBe(true);
      expect(first.context).toMatchObject({
        name: 'runbook',
        version: 1,
        size_bytes: 2,
        description: 'how we deploy',
      });
      const second = await save(orgA, 'runbook', 'version two');
      expect(second.created).toBe(false);
      expect(second.context).toMatchObject({
        id: first.context.id,
        version: 2,
        size_bytes: 11,
        description: 'how we deploy',
      });
      expect((await store.contexts.get(orgA, 'runbook'))?.content).toBe('version two');
      expect((await store.contexts.get(orgA, first.context.id))?.content).toBe('version two');
    });

    it('keeps organisations apart: same names, separate contents, no cross reads or deletes', async () => {
      const a = await save(orgA, 'spec', 'acme spec');
      await save(orgB, 'spec', 'globex spec');
      expect((await store.contexts.get(orgB, 'spec'))?.content).toBe('globex spec');
      expect(await store.contexts.get(orgB, a.context.id)).toBeUndefined();
      expect(await store.contexts.delete(orgB, a.context.id)).toBeUndefined();
      expect((await store.contexts.get(orgA, 'spec'))?.content).toBe('acme spec');
    });

    it('stores content byte for byte, multi-byte text included', async () => {
      const text = 'naïve — 日本語 — 🚀\n\ttabs and "quotes" \\ backslashes';
      await save(orgA, 'unicode', text);
      expect((await store.contexts.get(orgA, 'unicode'))?.content).toBe(text);
    });

    it('lists by name with prefix and cursor pagination, without content', async () => {
      for (const name of ['b/two', 'a/one', 'b/one', 'B/upper', 'c']) await save(orgA, name, name);
      await save(orgB, 'b/other-org', 'x');
      const page1 = await store.contexts.list(orgA, { limit: 2 });
      expect(page1.data.map((c) => c.name)).toEqual(['B/upper', 'a/one']);
      expect(page1.has_more).toBe(true);
      expect(page1.data[0]).not.toHaveProperty('content');
      const page2 = await store.contexts.list(orgA, { limit: 2, after: 'a/one' });
      expect(page2.data.map((c) => c.name)).toEqual(['b/one', 'b/two']);
      const page3 = await store.contexts.list(orgA, { limit: 2, after: 'b/two' });
      expect(page3).toEqual({ data: [expect.objectContaining({ name: 'c' })], has_more: false });
      const prefixed = await store.contexts.list(orgA, { limit: 10, prefix: 'b/' });
      expect(prefixed.data.map((c) => c.name)).toEqual(['b/one', 'b/two']);
    });

    it('deletes by id or by name, once', async () => {
      const { context } = await save(orgA, 'gone', 'x');
      await save(orgA, 'also-gone', 'y');
      expect(await store.contexts.delete(orgA, context.id)).toBe(context.id);
      expect(await store.contexts.delete(orgA, context.id)).toBeUndefined();
      expect(await store.contexts.delete(orgA, 'also-gone')).toMatch(/^ctx_/);
      expect((await store.contexts.list(orgA, { limit: 10 })).data).toEqual([]);
    });

    it('concurrent saves of one name lose no version', async () => {
      await Promise.all(Array.from({ length: 20 }, (_, i) => save(orgA, 'hot', `v${i}`)));
      const context = await store.contexts.get(orgA, 'hot');
      expect(context?.version).toBe(20);
      expect((await store.contexts.list(orgA, { limit: 10 })).data).toHaveLength(1);
    });

    it('concurrent transactions commit independently: one that fails takes nothing else with it', async () => {
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          store.transaction(async (tx) => {
            await tx.orgs.create(`batch-${i}`);
            if (i === 7) throw new Error('unit 7 fails');
            return i;
          }),
        ),
      );
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(19);
      expect(results[7]).toMatchObject({ status: 'rejected', reason: new Error('unit 7 fails') });
      expect(await store.orgs.byName('batch-7')).toBeUndefined();
      expect(await store.orgs.byName('batch-19')).toBeDefined();
      expect(await store.orgs.count()).toBe(2 + 19);
    });

    it('a failed transaction leaves nothing behind, and other work goes on meanwhile', async () => {
      const failing = store.driver.transaction(async (tx) => {
        await tx.run('INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)', ['org_tx', 'in-tx', 1]);
        await new Promise((r) => setTimeout(r, 20));
        throw new Error('boom');
      });
      const outside = store.orgs.create('outside');
      await expect(failing).rejects.toThrow('boom');
      expect((await outside)?.name).toBe('outside');
      expect(await store.orgs.byName('in-tx')).toBeUndefined();
      expect(await store.orgs.byName('outside')).toBeDefined();
    });
  });
}
