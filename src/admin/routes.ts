import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { issueKey } from '../auth/keys.js';
import { KilnError } from '../errors.js';
import type { Limits } from '../limits/schema.js';
import type { ApiKey, Org, Store } from '../store/index.js';
import {
  CreateKeyBody,
  CreateOrgBody,
  IdParams,
  ListKeysQuery,
  OrgParams,
  UpdateKeyBody,
  UpdateOrgBody,
} from './schemas.js';

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

const orgBody = (org: Org, limits: Limits) => ({
  object: 'organization',
  id: org.id,
  name: org.name,
  created_at: seconds(org.created_at),
  limits,
});

/** A key as the admin API shows it: never the key itself, never its hash. */
const keyBody = (key: ApiKey) => ({
  object: 'api_key',
  id: key.id,
  org_id: key.org_id,
  org: key.org_name,
  prefix: key.prefix,
  name: key.name,
  tier: key.tier,
  role: key.role,
  limits: key.limits,
  created_at: seconds(key.created_at),
  revoked_at: seconds(key.revoked_at),
});

async function orgNamed(store: Store, name: string): Promise<Org> {
  const org = await store.orgs.byName(name);
  if (!org) throw new KilnError('not-found', `no organisation '${name}'`);
  return org;
}

/**
 * The admin API: organisations and keys, with their limits, for admin keys only (a member key gets
 * 403). It manages every organisation, as `kiln orgs` and `kiln keys` do on the server.
 */
export function adminApiRoutes(app: FastifyInstance, deps: AppDeps): void {
  const { store } = deps;
  const requireAdmin = async (request: FastifyRequest) => {
    if (request.auth.role !== 'admin')
      throw new KilnError('forbidden', 'the admin API needs an admin key (kiln keys create --admin)');
  };

  app.register(async (admin) => {
    // Before the body is read or validated: a member key learns nothing of what the API would take.
    admin.addHook('onRequest', requireAdmin);

    admin.get('/admin/v1/orgs', async () => {
      const data = [];
      for (const org of await store.orgs.list()) data.push(orgBody(org, await store.orgs.limits(org.id)));
      return { object: 'list', data };
    });

    admin.post<{ Body: CreateOrgBody }>(
      '/admin/v1/orgs',
      { schema: { body: CreateOrgBody } },
      async (request, reply) => {
        const org = await store.orgs.create(request.body.name);
        if (!org)
          throw new KilnError('conflict', `organisation '${request.body.name}' already exists`, {
            param: 'name',
          });
        if (request.body.limits) await store.orgs.updateLimits(org.id, request.body.limits);
        return reply.status(201).send(orgBody(org, await store.orgs.limits(org.id)));
      },
    );

    admin.patch<{ Params: { name: string }; Body: UpdateOrgBody }>(
      '/admin/v1/orgs/:name',
      { schema: { params: OrgParams, body: UpdateOrgBody } },
      async (request) => {
        const org = await orgNamed(store, request.params.name);
        await store.orgs.updateLimits(org.id, request.body.limits);
        return orgBody(org, await store.orgs.limits(org.id));
      },
    );

    admin.get<{ Querystring: ListKeysQuery }>(
      '/admin/v1/keys',
      { schema: { querystring: ListKeysQuery } },
      async (request) => {
        const org = request.query.org ? await orgNamed(store, request.query.org) : undefined;
        return { object: 'list', data: (await store.keys.list(org?.id)).map(keyBody) };
      },
    );

    admin.post<{ Body: CreateKeyBody }>(
      '/admin/v1/keys',
      { schema: { body: CreateKeyBody } },
      async (request, reply) => {
        const { org: name, tier, role, name: label, limits } = request.body;
        const org = await orgNamed(store, name);
        const { key, record } = await issueKey(store, {
          orgId: org.id,
          ...(tier ? { tier } : {}),
          ...(role ? { role } : {}),
          name: label ?? null,
          ...(limits ? { limits } : {}),
        });
        // The key itself is in this answer only: it is stored as a hash.
        return reply.status(201).send({ ...keyBody(record), key });
      },
    );

    admin.patch<{ Params: { id: string }; Body: UpdateKeyBody }>(
      '/admin/v1/keys/:id',
      { schema: { params: IdParams, body: UpdateKeyBody } },
      async (request) => {
        const { tier, limits } = request.body;
        const key = await store.keys.update(request.params.id, {
          ...(tier ? { tier } : {}),
          ...(limits ? { limits } : {}),
        });
        if (!key) throw new KilnError('not-found', `no live key '${request.params.id}'`);
        return keyBody(key);
      },
    );

    admin.delete<{ Params: { id: string } }>(
      '/admin/v1/keys/:id',
      { schema: { params: IdParams } },
      async (request) => {
        if (!(await store.keys.revoke(request.params.id)))
          throw new KilnError('not-found', `no live key '${request.params.id}'`);
        return keyBody((await store.keys.byId(request.params.id)) as ApiKey);
      },
    );
  });
}
