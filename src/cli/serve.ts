import type { Command } from 'commander';
import type { Logger } from 'pino';
import { serverConfig, UsageError } from './common.js';

/** On SIGINT or SIGTERM: finish cleanly (running jobs go back to the queue), then exit. */
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
  const config = serverConfig(command);
  const { createLogger, startServer } = await import('../server.js');
  const logger = createLogger(config);
  const server = await startServer(config, logger);
  onStop(logger, () => server.close());
  // SIGHUP: re-read engines, personas and routing without dropping requests.
  process.on('SIGHUP', () => {
    server.runtime.reload().catch((error: unknown) => {
      logger.error({ err: error }, 'reload failed; the running configuration stays in force');
    });
  });
}

export function serveCommands(program: Command): void {
  program
    .command('serve')
    .description('run the gateway (HTTP API and workers) with the configured store')
    .action(async (_options, command: Command) => serve(command));

  program
    .command('worker')
    .description('run job workers, the sweeper and webhook delivery without HTTP (scale-out on PostgreSQL)')
    .action(async (_options, command: Command) => {
      const config = serverConfig(command);
      const { createLogger } = await import('../server.js');
      const { createRuntime } = await import('../runtime.js');
      const logger = createLogger(config);
      if (config.jobs.workers === 0) throw new UsageError('jobs.workers is 0: this worker would run nothing');
      const runtime = await createRuntime(config, logger);
      await runtime.startBackground();
      logger.info({ workers: config.jobs.workers, store: runtime.store.dialect }, 'kiln worker is running');
      onStop(logger, () => runtime.close());
    });

  program
    .command('migrate')
    .description('apply pending store migrations and exit (kiln serve also does this at start)')
    .action(async (_options, command: Command) => {
      const config = serverConfig(command);
      const { openStore } = await import('../store/index.js');
      const store = openStore(config.store);
      try {
        const applied = await store.migrate();
        process.stdout.write(`applied ${applied} migration(s) to the ${store.dialect} store\n`);
      } finally {
        await store.close();
      }
    });
}
