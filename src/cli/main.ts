import { Command } from 'commander';
import { VERSION } from '../version.js';
import { adminCommands } from './admin.js';
import { backupCommands } from './backup.js';
import { chatCommands } from './chat.js';
import { report } from './common.js';
import { ctxCommands } from './ctx.js';
import { devCommands } from './dev.js';
import { jobsCommands } from './jobs.js';
import { mcpCommand } from './mcp.js';
import { mediaCommands } from './media.js';
import { serveCommands } from './serve.js';
import { simCommands } from './sim.js';

export function buildProgram(): Command {
  const program = new Command('kiln')
    .description('Kiln: a self-hosted generation gateway in front of open-weights engines')
    .version(VERSION)
    .option('--config <path>', 'configuration file (default: KILN_CONFIG, else ./kiln.yaml when present)')
    .showHelpAfterError();
  serveCommands(program);
  devCommands(program);
  simCommands(program);
  adminCommands(program);
  backupCommands(program);
  ctxCommands(program);
  chatCommands(program);
  jobsCommands(program);
  mediaCommands(program);
  mcpCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  // `kiln … | head` closes the pipe early: that is the reader's choice, not an error.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(0);
    throw error;
  });
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    process.exitCode = report(error);
  }
}
