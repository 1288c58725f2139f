import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { OrgContexts } from '../contexts/service.js';
import { KilnError } from '../errors.js';
import type { Limiter } from '../limits/admission.js';
import { currentRateHeaders } from '../limits/hook.js';
import { refuseInvalidParams } from '../mcp/params.js';
import { createMcpServer } from '../mcp/server.js';
import type { Store } from '../store/index.js';

/** What an MCP client's user has to do, said in /mcp's 401 body and in its WWW-Authenticate. */
const BEARER_KEY_WANTED =
  'This MCP server takes a Kiln API key, not OAuth: use `Authorization: Bearer <kiln key>` in the MCP client';

/**
 * /mcp's 401 in MCP clients' terms. Clients that support OAuth answer a 401 by looking for OAuth
 * metadata: the `resource_metadata` of WWW-Authenticate, else /.well-known/oauth-protected-resource
 * and /.well-known/oauth-authorization-server. This challenge names no metadata and those paths
 * answer 404, so a client stops there with this message (the SDK's error quotes the body) instead
 * of opening a browser on an authorization server that does not exist.
 */
function explainBearerKey() {
  return async function bearerKeyChallenge(
    request: FastifyRequest,
    reply: FastifyReply,
    payload: unknown,
  ): Promise<unknown> {
    if (reply.statusCode !== 401) return payload;
    // RFC 6750: error="invalid_token" only when a credential was sent; a missing one gets none.
    const error = request.headers.authorization ? ', error="invalid_token"' : '';
    const description = BEARER_KEY_WANTED.replaceAll('"', "'");
    reply.header('www-authenticate', `Bearer realm="kiln"${error}, error_description="${description}"`);
    if (typeof payload !== 'string') return payload;
    try {
      const body = JSON.parse(payload) as { error?: { message?: unknown } };
      if (!body.error || typeof body.error.message !== 'string') return payload;
      body.error.message = `${body.error.message}. ${BEARER_KEY_WANTED}`;
      return JSON.stringify(body);
    } catch {
      return payload;
    }
  };
}

/**
 * MCP over Streamable HTTP at /mcp, stateless: each POST carries its own JSON-RPC exchange and is
 * served by a server bound to the caller's organisation, so any gateway process can answer it.
 */
export function mcpRoutes(
  app: FastifyInstance,
  deps: { store: Store; config: Config; runtime: { limiter: Limiter } },
): void {
  app.addHook('onSend', explainBearerKey());
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
    refuseInvalidParams(transport);
    // The transport writes its own head: the caller's rate-limit headers go on before it does.
    const limits = await currentRateHeaders(
      { store: deps.store, limiter: deps.runtime.limiter },
      request.auth,
    );
    for (const [name, value] of Object.entries(limits)) reply.raw.setHeader(name, String(value));
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
