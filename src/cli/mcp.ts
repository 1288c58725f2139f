import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Command } from 'commander';
import { createMcpServer } from '../mcp/server.js';
import { clientFromEnv } from './common.js';

export function mcpCommand(program: Command): void {
  program
    .command('mcp')
    .description('serve the context store to an MCP client over stdio (uses KILN_BASE_URL and KILN_API_KEY)')
    .action(async () => {
      const server = createMcpServer(clientFromEnv().contexts);
      await server.connect(new StdioServerTransport());
    });
}
