import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { JobService } from '../jobs/service.js';
import type { OutboundPolicy } from '../net/policy.js';
import type { Runtime } from '../runtime.js';
import type { Store } from '../store/index.js';
import { requireApiKey } from './auth.js';
import { chatRoutes } from './chat.js';
import { contextRoutes } from './contexts.js';
import { installErrorHandling } from './errors.js';
import { fileRoutes } from './files.js';
import { healthRoutes } from './health.js';
import { jobRoutes } from './jobs.js';
import { mcpRoutes } from './mcp.js';
import { mediaRoutes } from './media.js';
import { adminRoutes, metricsRoutes, modelRoutes } from './models.js';
import { validatorCompiler } from './validation.js';

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

/** The HTTP API, ready to listen or to be called in process with `inject`. */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger,
    genReqId: (req) => requestId(req.headers['x-request-id']),
    logController: new LogController({ requestIdLogLabel: 'request_id' }),
    // JSON escaping can grow text up to six-fold; the context cap itself is checked in bytes after parsing.
    bodyLimit: Math.max(1024 * 1024, deps.config.contexts.max_bytes * 6 + 64 * 1024),
  }) as unknown as FastifyInstance;

  app.setValidatorCompiler(validatorCompiler);
  // JSON in, JSON out: a text/plain body is a 415, not a string that fails validation.
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);
  app.decorateRequest('auth', null as never);
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  healthRoutes(app, deps);
  // Outside the authenticated scope: a signed URL works without a key (the route checks either).
  fileRoutes(app, { files: deps.runtime.files, store: deps.store });
  await app.register(async (authenticated) => {
    authenticated.addHook('onRequest', requireApiKey(deps.store));
    contextRoutes(authenticated, deps);
    jobRoutes(authenticated, deps);
    chatRoutes(authenticated, deps);
    mediaRoutes(authenticated, deps);
    modelRoutes(authenticated, deps);
    adminRoutes(authenticated, deps);
    metricsRoutes(authenticated, deps);
    mcpRoutes(authenticated, deps);
    deps.routes?.(authenticated, deps);
  });
  return app;
}
