import { Command } from 'commander';
import { VERSION } from '../version.js';
import { adminCommands } from './admin.js';
import { report } from './common.js';
import { ctxCommands } from './ctx.js';
import { devCommands } from './dev.js';
import { mcpCommand } from './mcp.js';
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
  ctxCommands(program);
  mcpCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    process.exitCode = report(error);
  }
}
