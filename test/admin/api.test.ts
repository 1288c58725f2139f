import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashKey } from '../../src/auth/keys.js';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** The admin API over HTTP: organisations and keys with their limits, for admin keys only. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`admin API: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let member: string;
    const kind = sleepKind();

    beforeAll(async () => {
      kiln = await startTestServer(storeCase, {}, { kinds: [kind as never], routes: sleepRoutes(kind) });
      member = await kiln.key('default');
    });
    afterAll(async () => {
      await kiln?.close();
    });

    it('answers a member key 403 on every admin route, whatever the body, and changes nothing', async () => {
      const routes: Array<[string, string, unknown?]> = [
        ['GET', '/admin/v1/orgs'],
        ['POST', '/admin/v1/orgs', { name: 'sneaky' }],
        ['PATCH', '/admin/v1/orgs/default', { limits: { concurrent: 0 } }],
        ['GET', '/admin/v1/keys'],
        ['POST', '/admin/v1/keys', { org: 'default', role: 'admin' }],
        ['PATCH', '/admin/v1/keys/key_x', { tier: 'free' }],
        ['DELETE', '/admin/v1/keys/key_x'],
        // Bodies the admin API would refuse: the role is checked first, so a member learns nothing.
        ['PATCH', '/admin/v1/keys/key_x', {}],
        ['POST', '/admin/v1/orgs', { name: 42, unknown: true }],
        ['POST', '/admin/v1/keys', '{not json'],
      ];
      for (const [method, route, body] of routes) {
        const answer = await kiln.call(method, route, { key: member, ...(body ? { body } : {}) });
        expect(answer.status, `${method} ${route}`).toBe(403);
        expect(answer.body.error.code).toBe('forbidden');
      }
      expect(await kiln.server.store.orgs.byName('sneaky')).toBeUndefined();
      expect(await kiln.call('GET', '/admin/v1/keys', { key: null }).then((a) => a.status)).toBe(401);
    });

    it('creates an organisation and a key shown once, stored as a hash; the key works, is limited, and is revoked', async () => {
      const org = await kiln.call('POST', '/admin/v1/orgs', {
        body: { name: 'acme', limits: { tokens_per_day: 500 } },
      });
      expect(org.status).toBe(201);
      expect(org.body).toMatchObject({
        object: 'organization',
        name: 'acme',
        limits: { tokens_per_day: 500 },
      });
      expect((await kiln.call('POST', '/admin/v1/orgs', { body: { name: 'acme' } })).status).toBe(409);
      const bad = await kiln.call('POST', '/admin/v1/orgs', { body: { name: '../acme' } });
      expect(bad.status).toBe(400);
      expect(bad.body.error.details[0].field).toBe('name');

      const created = await kiln.call('POST', '/admin/v1/keys', {
        body: { org: 'acme', tier: 'free', name: 'ci', limits: { requests_per_minute: 1 } },
      });
      expect(created.status).toBe(201);
      const { key, id } = created.body;
      expect(key).toMatch(/^kiln_sk_/);
      expect(created.body).toMatchObject({ org: 'acme', tier: 'free', role: 'member', name: 'ci' });
      expect((await kiln.server.store.keys.findActiveByHash(hashKey(key)))?.id).toBe(id);

      const listed = await kiln.call('GET', '/admin/v1/keys?org=acme');
      expect(listed.body.data).toHaveLength(1);
      expect(JSON.stringify(listed.body)).not.toContain(key);
      expect(JSON.stringify(listed.body)).not.toContain(hashKey(key));
      expect(listed.body.data[0]).toMatchObject({ id, limits: { requests_per_minute: 1 } });

      const sleep = () => kiln.call('POST', '/v1/test/sleep', { key, body: { ms: 1, mode: 'sync' } });
      expect((await sleep()).status).toBe(200);
      expect((await sleep()).status).toBe(429);
      const lifted = await kiln.call('PATCH', `/admin/v1/keys/${id}`, {
        body: { limits: { requests_per_minute: null } },
      });
      expect(lifted.status).toBe(200);
      expect(lifted.body.limits).toEqual({});
      expect((await sleep()).status).toBe(200);

      const org2 = await kiln.call('PATCH', '/admin/v1/orgs/acme', { body: { limits: { concurrent: 0 } } });
      expect(org2.body.limits).toEqual({ tokens_per_day: 500, concurrent: 0 });
      const refused = await sleep();
      expect(refused.status).toBe(429);
      expect(refused.body.error.details[0]).toMatchObject({ scope: 'org', field: 'concurrent' });

      const revoked = await kiln.call('DELETE', `/admin/v1/keys/${id}`);
      expect(revoked.status).toBe(200);
      expect(revoked.body.revoked_at).toEqual(expect.any(Number));
      expect((await sleep()).status).toBe(401);
      expect((await kiln.call('DELETE', `/admin/v1/keys/${id}`)).status).toBe(404);
      expect((await kiln.call('PATCH', `/admin/v1/keys/${id}`, { body: { tier: 'standard' } })).status).toBe(
        404,
      );
    });

    it('refuses bad input with a 400 naming the field, and unknown organisations with a 404', async () => {
      const cases: Array<[string, string, unknown, number, string]> = [
        ['POST', '/admin/v1/keys', { org: 'nowhere' }, 404, 'not-found'],
        ['POST', '/admin/v1/keys', { org: 'default', tier: 'gold' }, 400, 'validation-failed'],
        [
          'POST',
          '/admin/v1/keys',
          { org: 'default', limits: { requests_per_minute: -1 } },
          400,
          'validation-failed',
        ],
        ['POST', '/admin/v1/keys', { org: 'default', limits: { rpm: 1 } }, 400, 'validation-failed'],
        ['POST', '/admin/v1/keys', { org: 'default', name: '' }, 400, 'validation-failed'],
        ['POST', '/admin/v1/keys', { org: 'default', name: 'x'.repeat(201) }, 400, 'validation-failed'],
        ['POST', '/admin/v1/keys', { org: 'default', name: 'two\nlines' }, 400, 'validation-failed'],
        ['PATCH', '/admin/v1/keys/key_x', {}, 400, 'validation-failed'],
        ['PATCH', '/admin/v1/orgs/nowhere', { limits: { concurrent: 1 } }, 404, 'not-found'],
        ['PATCH', '/admin/v1/orgs/default', { limits: { concurrent: 1.5 } }, 400, 'validation-failed'],
      ];
      for (const [method, route, body, status, code] of cases) {
        const answer = await kiln.call(method, route, { body });
        expect(answer.status, `${method} ${route} ${JSON.stringify(body)}`).toBe(status);
        expect(answer.body.error.code).toBe(code);
      }
      const unknown = await kiln.call('GET', '/admin/v1/keys?org=nowhere');
      expect([unknown.status, unknown.body.error.message]).toEqual([404, "no organisation 'nowhere'"]);
      const noKey = await kiln.call('DELETE', '/admin/v1/keys/key_x');
      expect([noKey.status, noKey.body.error.message]).toEqual([404, "no live key 'key_x'"]);
    });
  });
}
