import type { FastifyInstance } from 'fastify';
import { type Logger, pino } from 'pino';
import { buildApp } from './api/app.js';
import { bootstrapStore } from './auth/bootstrap.js';
import type { Config } from './config/schema.js';
import { openStore, type Store } from './store/index.js';

export function createLogger(config: Config): Logger {
  return pino({
    level: config.log.level,
    redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
  });
}

export interface RunningServer {
  app: FastifyInstance;
  store: Store;
  /** Where clients reach it: server.public_url, or the address it listens on. */
  url: string;
  close(): Promise<void>;
}

/** Opens and migrates the store, creates the first admin key on an empty store, and listens. */
export async function startServer(
  config: Config,
  logger: Logger = createLogger(config),
): Promise<RunningServer> {
  const store = openStore(config.store);
  try {
    const applied = await store.migrate();
    if (applied > 0) logger.info({ applied, store: store.dialect }, 'store migrated');
    const keyFile = await bootstrapStore(store, config.data_dir);
    if (keyFile)
      logger.info(
        { path: keyFile },
        'created organisation "default" and an admin key; the key is in this file',
      );
  } catch (error) {
    await store.close().catch(() => undefined);
    throw error;
  }
  const app = await buildApp({ config, store, logger });
  await app.listen({ host: config.host, port: config.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  const url = config.public_url || `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  logger.info({ url, store: store.dialect }, 'kiln is listening');
  return {
    app,
    store,
    url,
    async close() {
      await app.close();
      await store.close();
    },
  };
}
