import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifySchema, RouteOptions } from 'fastify';
import { VERSION } from '../version.js';
import { type Auth, operationOf, RATE_HEADERS, TAGS, tagOf } from './operations.js';

/** Where the reference page lives; everything under it but the page itself is the page's own assets. */
export const DOCS_PREFIX = '/docs';
export const OPENAPI_PATH = '/openapi.json';

const SECURITY: Record<Auth, Array<Record<string, string[]>>> = {
  key: [{ bearerKey: [] }],
  none: [],
  // A signed URL's `expires` and `signature` stand in for the key: no header at all is an option.
  'key-or-signature': [{ bearerKey: [] }, {}],
};

/** `/v1/jobs/:id` → its path parameters as a schema, for routes that validate none themselves. */
function pathParams(url: string): TSchema | undefined {
  const names = [...url.matchAll(/:([A-Za-z0-9_]+)/g)].map((match) => match[1] as string);
  if (names.length === 0) return undefined;
  return Type.Object(Object.fromEntries(names.map((name) => [name, Type.String()])));
}

/** `GET /v1/jobs/{id}` → `get_v1_jobs_id`: stable, unique while a route has one method. */
const operationId = (method: string, url: string) =>
  `${method}${url.replace(/[^A-Za-z0-9]+/g, '_')}`.toLowerCase().replace(/_+$/, '');

/**
 * The document's view of one route: the request schemas the route validates with, untouched; its
 * summary, tag, security and (documentation only) responses from operations.ts. Fastify never sees
 * these responses, so nothing it sends is serialised through them.
 */
function describeRoute({
  schema,
  url: registered,
  route,
}: {
  schema: FastifySchema;
  url: string;
  route: RouteOptions;
}) {
  // Fastify registers the page as `/docs`, then re-uses the route's options (this object) for `/docs/`.
  const url = registered === `${DOCS_PREFIX}/` ? DOCS_PREFIX : registered;
  const methods = ([] as string[]).concat(route.method);
  const operation = operationOf(methods[0] as string, url);
  const auth = operation.auth ?? 'key';
  const named = methods.filter((method) => method !== 'HEAD');
  const publicUrl = operation.wildcard ? url.replace('*', `:${operation.wildcard.name}`) : url;
  const documented: Record<string, unknown> = {
    ...schema,
    ...(operation.wildcard
      ? { params: Type.Object({ [operation.wildcard.name]: operation.wildcard.schema }) }
      : {}),
    ...(operation.headers ? { headers: operation.headers } : {}),
    ...(operation.query ? { querystring: operation.query } : {}),
    ...(operation.body ? { body: operation.body } : {}),
    tags: [tagOf(url)],
    security: SECURITY[auth],
    ...(operation.summary ? { summary: operation.summary } : {}),
    ...(operation.description ? { description: operation.description } : {}),
    // HEAD beside GET is not documented apart (Swagger's default): the GET's id is the route's.
    ...(named.length === 1 ? { operationId: operationId(named[0] as string, publicUrl) } : {}),
  };
  // The reference page's own route is hidden by its plugin; the page itself is worth listing.
  if (url === DOCS_PREFIX) delete documented.hide;
  const params = schema?.params ?? documented.params ?? pathParams(url);
  if (params) documented.params = params;
  if (operation.responses) {
    documented.response = auth === 'none' ? operation.responses : withRateHeaders(operation.responses);
  }
  return { schema: documented, url: publicUrl };
}

/** Every success and 429 of an operation that takes a key, with OpenAI's rate-limit headers. */
function withRateHeaders(responses: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(responses).map(([status, response]) => {
      if (!/^2|^429$/.test(status)) return [status, response];
      const { headers } = response as { headers?: Record<string, unknown> };
      return [status, { ...(response as object), headers: { ...headers, ...RATE_HEADERS } }];
    }),
  );
}

/** Routes a test (or anything else not part of the API) adds in `scope`: kept out of the document. */
export function leaveUndocumented(scope: FastifyInstance): void {
  scope.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
  });
}

/**
 * Collects every route registered after it into an OpenAPI 3.1 document, served at /openapi.json,
 * and serves the reference page at /docs from the bundled Swagger UI (no network at run time).
 * Register it before the routes it describes.
 */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Kiln',
        version: VERSION,
        description:
          'A self-hosted generation gateway: one OpenAI-shaped API in front of open-weights engines, ' +
          'with durable async jobs and an organisation-wide context store. Send the API key as ' +
          '`Authorization: Bearer <key>`. Every error (4xx, 5xx) is the error envelope ' +
          '`{"error": {"type", "code", "message", "param", "details"?}}`, but for MCP protocol errors, ' +
          'which are JSON-RPC errors. A key or organisation with a per-minute limit gets OpenAI’s ' +
          '`x-ratelimit-*` headers on every answer.',
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
      },
      tags: TAGS,
      components: {
        securitySchemes: {
          bearerKey: { type: 'http', scheme: 'bearer', description: 'a Kiln API key, kiln_sk_…' },
        },
      },
    },
    transform: describeRoute as never,
  });

  app.get(OPENAPI_PATH, async () => app.swagger());

  await app.register(swaggerUi, {
    routePrefix: DOCS_PREFIX,
    theme: { title: 'Kiln API reference' },
    uiConfig: { deepLinking: true, docExpansion: 'list', defaultModelsExpandDepth: 0 },
    // Same-origin only: the page, its scripts and the document all come from this server.
    staticCSP:
      "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
      "connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'self'",
  });
}
