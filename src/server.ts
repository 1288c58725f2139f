import type { FastifyInstance } from 'fastify';
import { type Logger, pino } from 'pino';
import { type AppDeps, buildApp } from './api/app.js';
import { bootstrapStore } from './auth/bootstrap.js';
import type { Config } from './config/schema.js';
import type { JobKind } from './jobs/kinds.js';
import { createRuntime, type Runtime } from './runtime.js';
import type { Store } from './store/index.js';

export function createLogger(config: Config): Logger {
  return pino({
    level: config.log.level,
    redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
  });
}

export interface ServerOptions {
  /** Job kinds besides the built-in ones (tests register their own). */
  kinds?: JobKind<never, unknown>[];
  /** More routes on the authenticated API (tests register a route for their own job kind). */
  routes?: (app: FastifyInstance, deps: AppDeps) => void;
}

export interface RunningServer {
  app: FastifyInstance;
  store: Store;
  runtime: Runtime;
  /** Where clients reach it: public_url, or the address it listens on. */
  url: string;
  close(): Promise<void>;
}

/** Opens the store, creates the first admin key on an empty store, listens, then starts the workers. */
export async function startServer(
  config: Config,
  logger: Logger = createLogger(config),
  options: ServerOptions = {},
): Promise<RunningServer> {
  const runtime = await createRuntime(config, logger, options.kinds);
  try {
    const keyFile = await bootstrapStore(runtime.store, config.data_dir);
    if (keyFile)
      logger.info(
        { path: keyFile },
        'created organisation "default" and an admin key; the key is in this file',
      );
  } catch (error) {
    await runtime.close().catch(() => undefined);
    throw error;
  }
  const app = await buildApp({
    ...runtime,
    runtime,
    logger,
    ...(options.routes ? { routes: options.routes } : {}),
  });
  await app.listen({ host: config.host, port: config.port });
  await runtime.startBackground();
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  const url = config.public_url || `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  runtime.setPublicUrl(url);
  logger.info({ url, store: runtime.store.dialect, workers: config.jobs.workers }, 'kiln is listening');
  return {
    app,
    store: runtime.store,
    runtime,
    url,
    async close() {
      await app.close();
      await runtime.close();
    },
  };
}
