import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Saves that must not overwrite a teammate's work: `If-None-Match: *` creates only, `If-Match`
 * replaces only the version the caller read (its ETag), on every store.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`conditional context saves: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let alice: string;
    let bob: string;
    let outsider: string;

    beforeAll(async () => {
      kiln = await startTestServer(storeCase);
      alice = await kiln.key('acme');
      bob = await kiln.key('acme');
      outsider = await kiln.key('globex');
    });
    afterAll(async () => kiln?.close());

    const save = (key: string, name: string, content: string, headers: Record<string, string> = {}) =>
      kiln.call('POST', '/api/v1/contexts', { key, body: { name, content }, headers });
    const contentOf = async (name: string) =>
      (await kiln.call('GET', `/api/v1/contexts/${name}`, { key: alice })).body.content;

    it('creates with If-None-Match: *, and refuses to replace what a teammate created', async () => {
      const created = await save(alice, 'runbook', 'restart the queue', { 'if-none-match': '*' });
      expect(created.status).toBe(201);
      expect(created.headers.get('etag')).toBe(`"${created.body.id}.1"`);

      const clash = await save(bob, 'runbook', 'my own runbook', { 'if-none-match': '*' });
      expect(clash.status).toBe(412);
      expect(clash.body.error).toMatchObject({ code: 'context-exists', param: 'If-None-Match' });
      expect(clash.body.error.message).toContain(`version 1, ETag "${created.body.id}.1"`);
      expect(clash.body.context).toMatchObject({ id: created.body.id, name: 'runbook', version: 1 });
      expect(clash.body.context.content).toBeUndefined();
      expect(await contentOf('runbook')).toBe('restart the queue');

      // Names belong to an organisation: another one creates its own.
      expect((await save(outsider, 'runbook', 'theirs', { 'if-none-match': '*' })).status).toBe(201);
      expect(await contentOf('runbook')).toBe('restart the queue');
    });

    it('replaces with If-Match only the version read; a stale ETag changes nothing', async () => {
      const first = await save(alice, 'schema', 'v1 text');
      const read = await kiln.call('GET', '/api/v1/contexts/schema', { key: bob });
      const etag = read.headers.get('etag') as string;
      expect(etag).toBe(`"${first.body.id}.1"`);

      const alices = await save(alice, 'schema', 'alice edit', { 'if-match': etag });
      expect([alices.status, alices.body.version]).toEqual([200, 2]);
      expect(alices.headers.get('etag')).toBe(`"${first.body.id}.2"`);

      const bobs = await save(bob, 'schema', 'bob edit', { 'if-match': etag });
      expect(bobs.status).toBe(412);
      expect(bobs.body.error).toMatchObject({ code: 'context-changed', param: 'If-Match' });
      expect(bobs.body.context).toMatchObject({ id: first.body.id, version: 2 });
      expect(await contentOf('schema')).toBe('alice edit');

      // One of several ETags matching is enough; `*` is any version.
      const listed = await save(bob, 'schema', 'bob, merged', {
        'if-match': `"other", ${etag}, "${first.body.id}.2"`,
      });
      expect([listed.status, listed.body.version]).toEqual([200, 3]);
      const any = await save(bob, 'schema', 'bob again', { 'if-match': '*' });
      expect([any.status, any.body.version]).toEqual([200, 4]);
      // A version no context can reach (past PostgreSQL's 32-bit integer) matches nothing, on both stores.
      for (const version of ['2147483648', '99999999999', '9999999999999999999']) {
        const far = await save(alice, 'schema', 'far', { 'if-match': `"${first.body.id}.${version}"` });
        expect([far.status, far.body.error?.code], version).toEqual([412, 'context-changed']);
      }
      // A weak ETag never matches (If-Match compares strongly).
      const weak = await save(alice, 'schema', 'weak', { 'if-match': `W/"${first.body.id}.4"` });
      expect(weak.status).toBe(412);
      expect(await contentOf('schema')).toBe('bob again');
    });

    it('If-Match never creates: a deleted or re-created context fails it', async () => {
      const missing = await save(alice, 'nowhere', 'text', { 'if-match': '*' });
      expect(missing.status).toBe(412);
      expect(missing.body.error.code).toBe('context-changed');
      expect(missing.body.error.message).toContain("no context named 'nowhere'");
      expect((await kiln.call('GET', '/api/v1/contexts/nowhere', { key: alice })).status).toBe(404);

      const old = await save(alice, 'phoenix', 'first life');
      const etag = old.headers.get('etag') as string;
      await kiln.call('DELETE', '/api/v1/contexts/phoenix', { key: alice });
      const reborn = await save(bob, 'phoenix', 'second life');
      expect(reborn.body.version).toBe(1);
      const stale = await save(alice, 'phoenix', 'overwrite', { 'if-match': etag });
      expect(stale.status).toBe(412);
      expect(stale.body.context).toMatchObject({ id: reborn.body.id, version: 1 });
      expect(await contentOf('phoenix')).toBe('second life');
    });

    it('another organisation’s ETag is no key to this one’s context', async () => {
      const theirs = await save(outsider, 'shared-name', 'globex text');
      await save(alice, 'shared-name', 'acme text');
      const attempt = await save(alice, 'shared-name', 'x', {
        'if-match': theirs.headers.get('etag') as string,
      });
      expect(attempt.status).toBe(412);
      expect(attempt.body.context.id).not.toBe(theirs.body.id);
      const probe = await save(outsider, 'acme-only', 'x', { 'if-match': '*' });
      expect([probe.status, probe.body.context]).toEqual([412, undefined]);
    });

    it('deletes with If-Match only the version read; a stale ETag deletes nothing', async () => {
      const first = await save(alice, 'rota', 'v1 text');
      const etag = `"${first.body.id}.1"`;
      expect((await save(bob, 'rota', 'bob edit')).body.version).toBe(2);
      const del = (key: string, ifMatch: string) =>
        kiln.call('DELETE', '/api/v1/contexts/rota', { key, headers: { 'if-match': ifMatch } });

      const stale = await del(alice, etag);
      expect(stale.status).toBe(412);
      expect(stale.body.error).toMatchObject({ code: 'context-changed', param: 'If-Match' });
      expect(stale.body.error.message).toContain('Nothing was deleted.');
      expect(stale.body.context).toMatchObject({ id: first.body.id, name: 'rota', version: 2 });
      expect(await contentOf('rota')).toBe('bob edit');
      // Another organisation's key: the context is not there for it, whatever the tag.
      expect((await del(outsider, `"${first.body.id}.2"`)).status).toBe(404);
      expect((await del(alice, 'v2')).status).toBe(400);

      const current = await del(alice, `"${first.body.id}.2"`);
      expect(current.status).toBe(200);
      expect(current.body).toEqual({ id: first.body.id, object: 'context', deleted: true });
      expect((await del(alice, '*')).status).toBe(404);
    });

    it('answers 400 for preconditions it cannot read, and stores nothing', async () => {
      const cases: Array<[Record<string, string>, string]> = [
        [{ 'if-none-match': '"ctx_0.1"' }, 'If-None-Match'],
        [{ 'if-match': 'ctx_unquoted.1' }, 'If-Match'],
        [{ 'if-match': '"a", b' }, 'If-Match'],
        [{ 'if-match': '*', 'if-none-match': '*' }, 'If-Match'],
      ];
      for (const [headers, field] of cases) {
        const refused = await save(alice, 'never-saved', 'x', headers);
        expect(refused.status, JSON.stringify(headers)).toBe(400);
        expect(refused.body.error).toMatchObject({ code: 'validation-failed', param: field });
        expect(refused.body.error.details[0]).toMatchObject({
          field,
          rule: 'precondition',
          received: headers[field.toLowerCase()],
        });
      }
      expect((await kiln.call('GET', '/api/v1/contexts/never-saved', { key: alice })).status).toBe(404);
    });

    it('lets exactly one of many concurrent conditional saves through', async () => {
      const creates = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          save(i % 2 ? alice : bob, 'race', `writer ${i}`, { 'if-none-match': '*' }),
        ),
      );
      const won = creates.filter((r) => r.status === 201);
      expect(won).toHaveLength(1);
      expect(creates.filter((r) => r.status === 412)).toHaveLength(11);
      expect(await contentOf('race')).toBe(`writer ${creates.indexOf(won[0] as (typeof creates)[0])}`);

      const etag = won[0]?.headers.get('etag') as string;
      const edits = await Promise.all(
        Array.from({ length: 12 }, (_, i) => save(alice, 'race', `edit ${i}`, { 'if-match': etag })),
      );
      const applied = edits.filter((r) => r.status === 200);
      expect(applied).toHaveLength(1);
      expect(applied[0]?.body.version).toBe(2);
      expect(await contentOf('race')).toBe(`edit ${edits.indexOf(applied[0] as (typeof edits)[0])}`);
    });

    it('answers a fetch with the ETag held 304 and no content, until the context changes', async () => {
      const first = await save(alice, 'cached', 'a long schema, fetched often');
      const etag = first.headers.get('etag') as string;
      const get = (headers: Record<string, string>, key = bob) =>
        kiln.call('GET', '/api/v1/contexts/cached', { key, headers });

      for (const held of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
        const same = await get({ 'if-none-match': held });
        expect([same.status, same.body], held).toEqual([304, '']);
        expect(same.headers.get('etag'), held).toBe(etag);
        expect(same.headers.get('cache-control'), held).toBe('private, no-cache');
        // No length but the 200's may describe the content held (RFC 9110 §8.6): none at all.
        expect(same.headers.get('content-length'), held).toBeNull();
      }
      // By id as by name.
      const byId = await kiln.call('GET', `/api/v1/contexts/${first.body.id}`, {
        key: bob,
        headers: { 'if-none-match': etag },
      });
      expect(byId.status).toBe(304);

      await save(alice, 'cached', 'the schema, changed');
      const changed = await get({ 'if-none-match': etag });
      expect(changed.status).toBe(200);
      expect(changed.body.content).toBe('the schema, changed');
      expect(changed.headers.get('etag')).toBe(`"${first.body.id}.2"`);
      expect(changed.headers.get('cache-control')).toBe('private, no-cache');
      // Another organisation's key finds nothing to be unmodified: 404, as without the header.
      expect((await get({ 'if-none-match': etag }, outsider)).status).toBe(404);
      // A header that names nothing here is an ordinary fetch.
      expect((await get({ 'if-none-match': 'garbage' })).status).toBe(200);
    });
  });
}
