import type { Command } from 'commander';
import { createLogger, startServer } from '../server.js';
import { openStore } from '../store/index.js';
import { serverConfig } from './common.js';

export function serveCommands(program: Command): void {
  program
    .command('serve')
    .description('run the gateway (HTTP API and workers) with the configured store')
    .action(async (_options, command: Command) => {
      const config = serverConfig(command);
      const logger = createLogger(config);
      const server = await startServer(config, logger);
      let stopping = false;
      const stop = async (signal: string) => {
        if (stopping) return;
        stopping = true;
        logger.info({ signal }, 'shutting down');
        await server.close();
        process.exit(0);
      };
      process.on('SIGINT', () => void stop('SIGINT'));
      process.on('SIGTERM', () => void stop('SIGTERM'));
    });

  program
    .command('migrate')
    .description('apply pending store migrations and exit (kiln serve also does this at start)')
    .action(async (_options, command: Command) => {
      const config = serverConfig(command);
      const store = openStore(config.store);
      try {
        const applied = await store.migrate();
        process.stdout.write(`applied ${applied} migration(s) to the ${store.dialect} store\n`);
      } finally {
        await store.close();
      }
    });
}
