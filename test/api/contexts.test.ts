import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** The context store over HTTP, as a user of the gateway sees it, on every store implementation. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`contexts over HTTP: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let teammate: string;
    let outsider: string;

    beforeAll(async () => {
      kiln = await startTestServer(storeCase);
      teammate = await kiln.key('default');
      outsider = await kiln.key('globex');
    });
    afterAll(async () => kiln?.close());

    it('shares a context with the organisation and hides it from others', async () => {
      const saved = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'house-style', content: 'Write plainly.', description: 'tone of voice' },
      });
      expect(saved.status).toBe(201);
      expect(saved.body).toMatchObject({
        id: expect.stringMatching(/^ctx_[0-9a-f]{32}$/),
        object: 'context',
        name: 'house-style',
        description: 'tone of voice',
        size_bytes: 14,
        sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
        version: 1,
        shared: 'org',
      });

      const byName = await kiln.call('GET', '/api/v1/contexts/house-style', { key: teammate });
      expect(byName.status).toBe(200);
      expect(byName.body.content).toBe('Write plainly.');
      const byId = await kiln.call('GET', `/api/v1/contexts/${saved.body.id}`, { key: teammate });
      expect(byId.body).toEqual(byName.body);

      for (const ref of ['house-style', saved.body.id]) {
        const hidden = await kiln.call('GET', `/api/v1/contexts/${ref}`, { key: outsider });
        expect(hidden.status).toBe(404);
        expect(hidden.body.error).toMatchObject({ code: 'not-found', type: 'not_found_error' });
        expect((await kiln.call('DELETE', `/api/v1/contexts/${ref}`, { key: outsider })).status).toBe(404);
      }
      const outsiderList = await kiln.call('GET', '/api/v1/contexts', { key: outsider });
      expect(outsiderList.body).toEqual({ object: 'list', data: [], has_more: false });
    });

    it('answers with the SHA-256 of the content', async () => {
      const { createHash } = await import('node:crypto');
      const content = 'checksum me ✓';
      const saved = await kiln.call('POST', '/api/v1/contexts', { body: { name: 'hashed', content } });
      expect(saved.body.sha256).toBe(createHash('sha256').update(content).digest('hex'));
      expect(saved.body.size_bytes).toBe(Buffer.byteLength(content));
    });

    it('replaces on save by name: 200, same id, version bumped, description kept', async () => {
      const first = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'schema', content: 'v1', description: 'db' },
      });
      const second = await kiln.call('POST', '/api/v1/contexts', {
        key: teammate,
        body: { name: 'schema', content: 'v2' },
      });
      expect(second.status).toBe(200);
      expect(second.body).toMatchObject({ id: first.body.id, version: 2, description: 'db', size_bytes: 2 });
      expect(second.body.created_by).toBe(first.body.created_by);
      expect((await kiln.call('GET', '/api/v1/contexts/schema')).body.content).toBe('v2');
    });

    it('refuses content over the cap with 413, stores nothing, and keeps the previous version intact', async () => {
      const big = 'x'.repeat(300 * 1024);
      const refused = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'too-big', content: big },
      });
      expect(refused.status).toBe(413);
      expect(refused.body.error).toMatchObject({
        code: 'context-too-large',
        details: [{ field: 'content', rule: 'max_bytes', limit: 262144, received: 307200 }],
      });
      expect((await kiln.call('GET', '/api/v1/contexts/too-big')).status).toBe(404);

      await kiln.call('POST', '/api/v1/contexts', { body: { name: 'keeper', content: 'small' } });
      expect(
        (await kiln.call('POST', '/api/v1/contexts', { body: { name: 'keeper', content: big } })).status,
      ).toBe(413);
      expect((await kiln.call('GET', '/api/v1/contexts/keeper')).body).toMatchObject({
        content: 'small',
        version: 1,
      });
    });

    it('counts the cap in UTF-8 bytes, not characters', async () => {
      const exactly = 'é'.repeat(262144 / 2);
      expect(
        (await kiln.call('POST', '/api/v1/contexts', { body: { name: 'at-cap', content: exactly } })).status,
      ).toBe(201);
      const over = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'over-cap', content: `${exactly}a` },
      });
      expect(over.status).toBe(413);
      expect(over.body.error.details[0].received).toBe(262145);
    });

    it('lists without content, by name, with prefix and cursor', async () => {
      for (const name of ['team/a', 'team/b', 'team/c']) {
        await kiln.call('POST', '/api/v1/contexts', { body: { name, content: name } });
      }
      const page = await kiln.call('GET', '/api/v1/contexts?prefix=team/&limit=2');
      expect(page.status).toBe(200);
      expect(page.body.object).toBe('list');
      expect(page.body.data.map((c: { name: string }) => c.name)).toEqual(['team/a', 'team/b']);
      expect(page.body.has_more).toBe(true);
      expect(page.body.data[0]).not.toHaveProperty('content');
      const next = await kiln.call('GET', '/api/v1/contexts?prefix=team/&limit=2&after=team/b');
      expect(next.body.data.map((c: { name: string }) => c.name)).toEqual(['team/c']);
      expect(next.body.has_more).toBe(false);
    });

    it('addresses names with slashes whether or not the slash is encoded, and deletes once', async () => {
      expect((await kiln.call('GET', '/api/v1/contexts/team%2Fa')).body.content).toBe('team/a');
      const deleted = await kiln.call('DELETE', '/api/v1/contexts/team/a', { key: teammate });
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ id: expect.stringMatching(/^ctx_/), object: 'context', deleted: true });
      expect((await kiln.call('DELETE', '/api/v1/contexts/team/a')).status).toBe(404);
      expect((await kiln.call('GET', '/api/v1/contexts/team/a')).status).toBe(404);
    });

    it('answers 401 with the envelope for a missing, malformed, unknown or revoked key', async () => {
      const revokedKey = await kiln.key('default');
      const { hashKey } = await import('../../src/auth/keys.js');
      const record = await kiln.server.store.keys.findActiveByHash(hashKey(revokedKey));
      await kiln.server.store.keys.revoke(record?.id as string);

      const attempts: Array<Record<string, string>> = [
        {},
        { authorization: 'Basic Zm9vOmJhcg==' },
        { authorization: 'Bearer' },
        { authorization: 'Bearer kiln_sk_0000000000000000000000000000000000' },
        { authorization: `Bearer ${revokedKey}` },
      ];
      for (const headers of attempts) {
        const answer = await kiln.call('GET', '/api/v1/contexts', { key: null, headers });
        expect(answer.status, JSON.stringify(headers)).toBe(401);
        expect(answer.body.error).toMatchObject({ type: 'authentication_error', code: 'unauthorized' });
        expect(answer.body.error.message).not.toHaveLength(0);
        expect(answer.headers.get('www-authenticate')).toBe('Bearer');
      }
    });

    it('serves health without a key: /healthz up, /readyz with the store', async () => {
      expect((await kiln.call('GET', '/healthz', { key: null })).body).toEqual({ status: 'ok' });
      expect((await kiln.call('GET', '/readyz', { key: null })).body).toEqual({
        status: 'ready',
        store: storeCase.name,
      });
    });

    it('echoes a request id on every answer', async () => {
      const mine = await kiln.call('GET', '/healthz', {
        key: null,
        headers: { 'x-request-id': 'trace-123' },
      });
      expect(mine.headers.get('x-request-id')).toBe('trace-123');
      const generated = await kiln.call('GET', '/api/v1/contexts');
      expect(generated.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    });
  });
}
