import type { FastifyInstance } from 'fastify';
import { type Logger, pino } from 'pino';
import { type AppDeps, buildApp } from './api/app.js';
import { bootstrapStore } from './auth/bootstrap.js';
import { type Config, parseDuration } from './config/schema.js';
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
  /**
   * Stops gracefully: no new connections or queued jobs; requests and jobs in flight get `graceMs`
   * (default `shutdown_grace`) to finish; what still runs then goes back to the queue.
   */
  close(graceMs?: number): Promise<void>;
}

/** The bind failures a user can fix by choosing another address, and what each means. */
const BIND_FAILURES = {
  EADDRINUSE: 'the port is already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the host is not an address of this machine',
} as const;

export type BindFailure = keyof typeof BIND_FAILURES;

/** `host:port` as a URL writes it (IPv6 in brackets). */
/** How often a closing server closes the kept-alive connections that went idle since. */
const IDLE_SWEEP_MS = 100;

const hostPort = (host: string, port: number) => `${host.includes(':') ? `[${host}]` : host}:${port}`;

/** The gateway could not take its address; everything the start had opened is closed again. */
export class ListenError extends Error {
  override name = 'ListenError';
  constructor(
    readonly host: string,
    readonly port: number,
    readonly code: BindFailure,
    options: { cause: unknown },
  ) {
    super(`cannot listen on ${hostPort(host, port)}: ${BIND_FAILURES[code]}`, options);
  }
}

async function listen(app: FastifyInstance, config: Config): Promise<void> {
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== undefined && code in BIND_FAILURES) {
      throw new ListenError(config.host, config.port, code as BindFailure, { cause: error });
    }
    throw error;
  }
}

/**
 * Opens the store, creates the first admin key on an empty store, listens, then starts the workers.
 * A start that fails on the way (a busy port, most often) closes what it opened before it throws.
 */
export async function startServer(
  config: Config,
  logger: Logger = createLogger(config),
  options: ServerOptions = {},
): Promise<RunningServer> {
  const runtime = await createRuntime(config, logger, options.kinds);
  let app: FastifyInstance | undefined;
  try {
    const keyFile = await bootstrapStore(runtime.store, config.data_dir);
    if (keyFile)
      logger.info(
        { path: keyFile },
        'created organisation "default" and an admin key; the key is in this file',
      );
    app = await buildApp({
      ...runtime,
      runtime,
      logger,
      ...(options.routes ? { routes: options.routes } : {}),
    });
    await listen(app, config);
    await runtime.startBackground();
  } catch (error) {
    const stopped = (err: unknown) => logger.error({ err }, 'while stopping after a failed start');
    await app?.close().catch(stopped);
    await runtime.close().catch(stopped);
    throw error;
  }
  const listening = app;
  const address = listening.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const url =
    config.public_url || `http://${hostPort(config.host === '0.0.0.0' ? '127.0.0.1' : config.host, port)}`;
  runtime.setPublicUrl(url);
  logger.info({ url, store: runtime.store.dialect, workers: config.jobs.workers }, 'kiln is listening');
  return {
    app: listening,
    store: runtime.store,
    runtime,
    url,
    async close(graceMs = parseDuration(config.shutdown_grace)) {
      // Stop accepting; requests in flight get the grace to finish (the worker still runs the jobs
      // they wait for), then their connections are cut. Then no more queued jobs are taken, running
      // ones get what is left of the grace, and those still running go back to the queue at once.
      const deadline = Date.now() + graceMs;
      const cut = setTimeout(() => listening.server.closeAllConnections(), graceMs);
      // A kept-alive connection whose answer ends after the close began goes idle, and would hold
      // the close until the grace runs out: closed as it goes idle, as those idle at the start are.
      const idle = setInterval(() => listening.server.closeIdleConnections(), IDLE_SWEEP_MS);
      await listening.close();
      clearTimeout(cut);
      clearInterval(idle);
      await runtime.drain(deadline);
      await runtime.close();
    },
  };
}
