import type { Command } from 'commander';
import { clientFromEnv } from './common.js';

export function mcpCommand(program: Command): void {
  program
    .command('mcp')
    .description('serve the context store to an MCP client over stdio (uses KILN_BASE_URL and KILN_API_KEY)')
    .action(async () => {
      const contexts = clientFromEnv().contexts;
      const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
      const { createMcpServer } = await import('../mcp/server.js');
      const { refuseInvalidParams } = await import('../mcp/params.js');
      const server = createMcpServer(contexts);
      const transport = new StdioServerTransport();
      await server.connect(transport);
      refuseInvalidParams(transport);
    });
}
