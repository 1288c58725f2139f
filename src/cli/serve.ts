import { type Command, InvalidArgumentError } from 'commander';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { RunningServer } from '../server.js';
import { serverConfig, UsageError } from './common.js';

/** `--port`: a whole number from 0 to 65535, as the `port` key allows. */
export function portNumber(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || value > 65535) {
    throw new InvalidArgumentError('expected a whole number from 0 to 65535 (0 = any free port)');
  }
  return value;
}

/** Adds `--port` to a command that starts the gateway. */
export function withPortOption(command: Command): Command {
  return command.option(
    '--port <port>',
    'HTTP port, over KILN_PORT and the config file (0 = any free port)',
    portNumber,
  );
}

/** The configuration `kiln serve` runs with: `--config` (or `file`), KILN_*, and `--port` over both. */
export async function gatewayConfig(command: Command, file?: string) {
  const { config, port } = command.optsWithGlobals<{ config?: string; port?: number }>();
  const { loadConfig } = await import('../config/load.js');
  return loadConfig({ file: file ?? config, overrides: port === undefined ? {} : { port } });
}

/**
 * Starts the gateway; a bind failure (busy port, privileged port, foreign host) becomes one line
 * saying how to choose another address. `startServer` has closed everything it opened by then.
 */
export async function startGateway(
  config: Config & { configFile?: string | undefined },
  logger: Logger,
  userFile: string | undefined,
): Promise<RunningServer> {
  const { ListenError, startServer } = await import('../server.js');
  try {
    return await startServer(config, logger);
  } catch (error) {
    if (!(error instanceof ListenError)) throw error;
    const where = userFile ?? 'kiln.yaml';
    const how =
      error.code === 'EADDRNOTAVAIL'
        ? `choose another host with KILN_HOST or "host:" in ${where} (127.0.0.1 for this machine only, 0.0.0.0 for every interface)`
        : `choose another port with --port <n>, KILN_PORT=<n> or "port: <n>" in ${where} (0 = any free port)`;
    throw new UsageError(`${error.message}; ${how}`);
  }
}

/**
 * On SIGINT or SIGTERM: stop gracefully (requests and jobs in flight get `shutdown_grace` to
 * finish; jobs still running then go back to the queue, for another process at once), then exit 0.
 */
function onStop(logger: Logger, close: () => Promise<void>): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    await close();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

/** `kiln serve`: the gateway with the configured store, until SIGINT/SIGTERM; SIGHUP reloads the fleet. */
export async function serve(command: Command): Promise<void> {
  const config = await gatewayConfig(command);
  const { createLogger } = await import('../server.js');
  const logger = createLogger(config);
  const server = await startGateway(config, logger, config.configFile);
  onStop(logger, () => server.close());
  // SIGHUP: re-read engines, personas, routing, limits and runners without dropping requests.
  process.on('SIGHUP', () => {
    server.runtime.reload().catch((error: unknown) => {
      logger.error({ err: error }, 'reload failed; the running configuration stays in force');
    });
  });
}

export function serveCommands(program: Command): void {
  withPortOption(
    program.command('serve').description('run the gateway (HTTP API and workers) with the configured store'),
  ).action(async (_options, command: Command) => serve(command));

  program
    .command('worker')
    .description('run job workers, the sweeper and webhook delivery without HTTP (scale-out on PostgreSQL)')
    .action(async (_options, command: Command) => {
      const config = await serverConfig(command);
      const { createLogger } = await import('../server.js');
      const { createRuntime } = await import('../runtime.js');
      const logger = createLogger(config);
      if (config.jobs.workers === 0) throw new UsageError('jobs.workers is 0: this worker would run nothing');
      const runtime = await createRuntime(config, logger);
      // Without it, what a worker does (its jobs, engine calls, webhooks) is counted nowhere. Bound
      // before any job is claimed, so that a busy port stops the worker while it holds nothing.
      // What the runtime opened (the store, its timers) is closed on that failure, or the process
      // would stay up doing nothing, and look alive to a supervisor.
      const scrapes =
        config.metrics.port === 0
          ? undefined
          : await (await import('../metrics/listener.js'))
              .listenForScrapes(runtime, logger)
              .catch(async (error: unknown) => {
                await runtime.close().catch(() => undefined);
                throw error;
              });
      await runtime.startBackground();
      logger.info(
        { workers: config.jobs.workers, store: runtime.store.dialect, metrics: scrapes?.url },
        'kiln worker is running',
      );
      const { parseDuration } = await import('../config/duration.js');
      onStop(logger, async () => {
        await runtime.drain(Date.now() + parseDuration(config.shutdown_grace));
        await scrapes?.close();
        await runtime.close();
      });
    });

  program
    .command('migrate')
    .description('apply pending store migrations and exit (kiln serve also does this at start)')
    .action(async (_options, command: Command) => {
      const config = await serverConfig(command);
      const { openStore } = await import('../store/index.js');
      const store = openStore(config.store);
      try {
        // A store from a newer Kiln has nothing for this one to apply, and is not this one's to vouch for.
        const { newerStoreProblem } = await import('../store/migrations.js');
        const newer = newerStoreProblem(await store.schemaVersion().catch(() => 0));
        if (newer) throw new UsageError(`${newer}: nothing to apply, and nothing was changed`);
        const applied = await store.migrate();
        process.stdout.write(`applied ${applied} migration(s) to the ${store.dialect} store\n`);
      } finally {
        await store.close();
      }
    });
}
