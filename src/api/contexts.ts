import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { ContextRef, ListContextsQuery, SaveContextBody } from '../contexts/schemas.js';
import { etagOf, OrgContexts } from '../contexts/service.js';
import type { Store } from '../store/index.js';
import { matchesEtag } from './files.js';
import { assertValid } from './validation.js';

/** The context store under /api/v1/contexts (DESIGN.md section 6). */
export function contextRoutes(app: FastifyInstance, deps: { store: Store; config: Config }): void {
  const contextsOf = (request: FastifyRequest) =>
    new OrgContexts(deps.store, deps.config.contexts.max_bytes, {
      orgId: request.auth.org_id,
      keyId: request.auth.id,
    });

  /** Names may hold `/`, so the reference is the rest of the path, encoded or not. */
  const refOf = (request: FastifyRequest) =>
    assertValid<string>(ContextRef, (request.params as { '*': string })['*'], 'id_or_name');

  app.post<{ Body: SaveContextBody }>(
    '/api/v1/contexts',
    { schema: { body: SaveContextBody } },
    async (request, reply) => {
      const { context, created } = await contextsOf(request).save(request.body, {
        ifNoneMatch: request.headers['if-none-match'],
        ifMatch: request.headers['if-match'],
      });
      return reply
        .status(created ? 201 : 200)
        .header('etag', etagOf(context))
        .send(context);
    },
  );

  app.get<{ Querystring: ListContextsQuery }>(
    '/api/v1/contexts',
    { schema: { querystring: ListContextsQuery } },
    async (request) => contextsOf(request).list(request.query),
  );

  app.get('/api/v1/contexts/*', async (request, reply) => {
    const context = await contextsOf(request).get(refOf(request));
    const etag = etagOf(context);
    // An organisation's text, for no shared cache; a private one asks each time (If-None-Match).
    reply.header('etag', etag).header('cache-control', 'private, no-cache');
    // A client that holds this version is told so, without the content.
    if (matchesEtag(request.headers['if-none-match'], etag)) return reply.status(304).send();
    return reply.send(context);
  });

  app.delete('/api/v1/contexts/*', async (request) =>
    contextsOf(request).delete(refOf(request), request.headers['if-match']),
  );
}
