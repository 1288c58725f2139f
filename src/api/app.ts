import { isUtf8 } from 'node:buffer';
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyRequest, LogController } from 'fastify';
import type { Logger } from 'pino';
import { fleetRoutes } from '../admin/fleet.js';
import { adminApiRoutes } from '../admin/routes.js';
import type { Config } from '../config/schema.js';
import { consoleApiRoutes } from '../console/routes.js';
import { consoleRoutes } from '../console/serve.js';
import { leaveUndocumented, registerDocs } from '../docs/index.js';
import { KilnError } from '../errors.js';
import type { JobService } from '../jobs/service.js';
import { rateHeadersHook } from '../limits/hook.js';
import { httpMetrics } from '../metrics/http.js';
import { metricsRoutes } from '../metrics/routes.js';
import type { OutboundPolicy } from '../net/policy.js';
import { responseRoutes } from '../responses/routes.js';
import type { Runtime } from '../runtime.js';
import type { Store } from '../store/index.js';
import { traceRequests } from '../telemetry/index.js';
import { requireApiKey } from './auth.js';
import { chatRoutes } from './chat.js';
import { refuseWhileClosing } from './closing.js';
import { contextRoutes } from './contexts.js';
import { answerClientError, installErrorHandling, sendError } from './errors.js';
import { fileRoutes } from './files.js';
import { healthRoutes } from './health.js';
import { jobRoutes } from './jobs.js';
import { mcpRoutes } from './mcp.js';
import { mediaRoutes } from './media.js';
import { adminRoutes, modelRoutes } from './models.js';
import { refuseUnstorableText, validatorCompiler } from './validation.js';

export interface AppDeps {
  config: Config;
  store: Store;
  jobs: JobService;
  policy: OutboundPolicy;
  runtime: Runtime;
  logger: Logger;
  routes?: (app: FastifyInstance, deps: AppDeps) => void;
}

/** A caller's own request id is kept when it is a sane token, so logs join up across services. */
function requestId(header: string | string[] | undefined): string {
  return typeof header === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(header) ? header : randomUUID();
}

/** Query parameters whose values are credentials: a signed file URL's `signature`, tokens, keys. */
const SECRET_PARAMETER = /sig|token|secret|pass|auth|credential|key/i;

/**
 * `url` with the values of credential-like query parameters replaced, so no log line holds one.
 * Parts are split at `&` and `;` and read decoded, so `signature%3D…` or `;signature=…`, which no
 * route takes but a log would keep, are redacted as well.
 */
export function redactUrl(url: string): string {
  const start = url.indexOf('?');
  if (start === -1) return url;
  const parts = url
    .slice(start + 1)
    .split(/([&;])/)
    .map((part, i) => {
      if (i % 2 === 1) return part; // a separator
      let decoded = part;
      try {
        decoded = decodeURIComponent(part.replaceAll('+', ' '));
      } catch {}
      const equals = decoded.indexOf('=');
      const name = equals === -1 ? decoded : decoded.slice(0, equals);
      if (!SECRET_PARAMETER.test(name)) return part;
      const rawEquals = part.indexOf('=');
      return rawEquals === -1 ? '[redacted]' : `${part.slice(0, rawEquals)}=[redacted]`;
    });
  return `${url.slice(0, start)}?${parts.join('')}`;
}

/** Fastify's request log fields, with the URL's credentials redacted. */
function requestLogFields(request: FastifyRequest) {
  return {
    method: request.method,
    url: redactUrl(request.url),
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  };
}

/** The HTTP API, ready to listen or to be called in process with `inject`. */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    // Every request's log lines go through this serializer, whatever logger the caller passed.
    loggerInstance: deps.logger.child({}, { serializers: { req: requestLogFields } }),
    genReqId: (req) => requestId(req.headers['x-request-id']),
    logController: new LogController({ requestIdLogLabel: 'request_id' }),
    // JSON escaping can grow text up to six-fold; the context cap itself is checked in bytes after parsing.
    bodyLimit: Math.max(1024 * 1024, deps.config.contexts.max_bytes * 6 + 64 * 1024),
    // Errors raised before routing get the envelope too.
    frameworkErrors: sendError,
    clientErrorHandler: answerClientError,
    // Kiln's own refusal while closing, in its envelope and with Retry-After (refuseWhileClosing).
    return503OnClosing: false,
  }) as unknown as FastifyInstance;

  app.setValidatorCompiler(validatorCompiler);
  // JSON in, JSON out: a text/plain body is a 415, not a string that fails validation.
  app.removeContentTypeParser('text/plain');
  acceptEmptyJsonWithoutBody(app);
  installErrorHandling(app);
  app.decorateRequest('auth', null as never);
  refuseWhileClosing(app);
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.header('x-request-id', request.id);
    done(null, payload);
  });
  // At the root, so that every response is counted: unauthenticated, unmatched and MCP ones too.
  const http = httpMetrics();
  app.addHook('onRequest', http.onRequest);
  app.addHook('onResponse', http.onResponse);
  // A server span per request (when tracing is on), active before authentication runs.
  traceRequests(app);
  // The landing page, /openapi.json and /docs; the document collects the routes registered after it.
  await registerDocs(app, deps);
  // The console's page and assets; what it reads is the API below, with the signed-in key.
  consoleRoutes(app);

  await app.register(async (api) => {
    // Text one store would refuse or change (NUL, lone surrogates) is refused up front, on both.
    api.addHook('preValidation', refuseUnstorableText());
    healthRoutes(api, deps);
    // Open, /metrics needs no key: a scraper then needs no key, nor the store to check one.
    if (deps.config.metrics.open) metricsRoutes(api, deps);
    // Outside the authenticated scope: a signed URL works without a key (the route checks either).
    // A caller with a key gets its rate-limit headers here too; a signed URL's has none.
    await api.register(async (files) => {
      rateHeadersHook(files, { store: deps.store, limiter: deps.runtime.limiter });
      fileRoutes(files, { files: deps.runtime.files, store: deps.store });
    });
    await api.register(async (authenticated) => {
      authenticated.addHook('onRequest', requireApiKey(deps.store));
      rateHeadersHook(authenticated, { store: deps.store, limiter: deps.runtime.limiter });
      contextRoutes(authenticated, deps);
      jobRoutes(authenticated, deps);
      chatRoutes(authenticated, deps);
      responseRoutes(authenticated, deps);
      mediaRoutes(authenticated, deps);
      modelRoutes(authenticated, deps);
      adminRoutes(authenticated, deps);
      adminApiRoutes(authenticated, deps);
      fleetRoutes(authenticated, deps);
      consoleApiRoutes(authenticated, deps);
      if (!deps.config.metrics.open) metricsRoutes(authenticated, deps);
      // Routes a caller adds (tests do) are not part of the public API, nor of its document.
      authenticated.register(async (extra) => {
        leaveUndocumented(extra);
        deps.routes?.(extra, deps);
      });
    });
  });
  // MCP answers bad arguments in its own terms (tool errors, JSON-RPC errors), NUL included.
  await app.register(async (mcp) => {
    mcp.addHook('onRequest', requireApiKey(deps.store));
    mcpRoutes(mcp, deps);
  });
  return app;
}

/** Whether `text` is JSON (Fastify's parser also refuses JSON that sets a prototype). */
function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * Many clients send `Content-Type: application/json` and no body on a POST that takes none
 * (`POST /v1/jobs/{id}/cancel`): a route without a body schema gets no body instead of a 400. Where
 * a body is expected, an empty one is still 400 `invalid-json`, and so is any body that is not JSON,
 * or not UTF-8: decoding it would turn its bad bytes into U+FFFD and store that as if it were sent.
 * A compressed body (`Content-Encoding: gzip`) is 415: Kiln reads bodies as they are sent.
 */
function acceptEmptyJsonWithoutBody(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser(
    'application/json',
    { parseAs: 'buffer' },
    function parseJsonBody(request, body, done) {
      const bytes = body as Buffer;
      const encoding = request.headers['content-encoding'];
      if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
        done(
          new KilnError(
            'unsupported-media-type',
            `Content-Encoding ${encoding} is not supported: send the JSON body uncompressed`,
          ),
        );
        return;
      }
      if (bytes.length === 0 && !request.routeOptions.schema?.body) {
        done(null, undefined);
        return;
      }
      if (!isUtf8(bytes)) {
        const message = 'the body is not valid UTF-8; JSON must be sent as UTF-8';
        done(new KilnError('invalid-json', message, { details: [{ field: 'body', rule: 'json', message }] }));
        return;
      }
      const text = bytes.toString('utf8');
      parseJson(request, text, (error, parsed) => {
        if (error && isJson(text)) {
          // JSON, refused for a key that sets an object's prototype: said so, not "not JSON".
          const message =
            'the body has a "__proto__" key, or a "constructor" holding "prototype", which Kiln refuses anywhere in a body';
          done(
            new KilnError('validation-failed', message, {
              details: [{ field: 'body', rule: 'json', message }],
            }),
          );
          return;
        }
        done(error, parsed);
      });
    },
  );
}
