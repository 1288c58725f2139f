import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/schema.js';
import { OrgContexts } from '../contexts/service.js';
import { KilnError } from '../errors.js';
import { createMcpServer } from '../mcp/server.js';
import type { Store } from '../store/index.js';

/**
 * MCP over Streamable HTTP at /mcp, stateless: each POST carries its own JSON-RPC exchange and is
 * served by a server bound to the caller's organisation, so any gateway process can answer it.
 */
export function mcpRoutes(app: FastifyInstance, deps: { store: Store; config: Config }): void {
  app.post('/mcp', async (request, reply) => {
    const contexts = new OrgContexts(deps.store, deps.config.contexts.max_bytes, {
      orgId: request.auth.org_id,
      keyId: request.auth.id,
    });
    const server = createMcpServer(contexts);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    reply.hijack();
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });

  const stateless = async () => {
    throw new KilnError(
      'method-not-allowed',
      'this MCP endpoint is stateless: send each JSON-RPC message with POST',
    );
  };
  app.get('/mcp', stateless);
  app.delete('/mcp', stateless);
}
