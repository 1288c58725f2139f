import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * /mcp without a usable key, as the official SDK client meets it: a 401 that says a Kiln key is
 * wanted, and no OAuth to discover, so neither a plain client nor one able to do OAuth goes
 * anywhere near a browser.
 */

let server: TestServer;
let key: string;
const clients: Client[] = [];

beforeAll(async () => {
  server = await startTestServer(storeCases[0] as StoreCase);
  key = await server.key('acme');
});

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await server?.close();
});

function transport(
  headers: Record<string, string>,
  authProvider?: OAuthClientProvider,
): StreamableHTTPClientTransport {
  return new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers },
    ...(authProvider ? { authProvider } : {}),
  });
}

async function connect(t: StreamableHTTPClientTransport): Promise<Client> {
  const client = new Client({ name: 'kiln-test', version: '0.0.0' });
  clients.push(client);
  await client.connect(t);
  return client;
}

/** How long `work` took and how it failed; the test fails if it succeeded. */
async function failure(work: () => Promise<unknown>): Promise<{ error: Error; ms: number }> {
  const started = Date.now();
  try {
    await work();
  } catch (error) {
    return { error: error as Error, ms: Date.now() - started };
  }
  throw new Error('expected a failure');
}

/** An OAuth-capable client, as Claude, Cursor or VS Code configure the SDK; records what it was asked to do. */
function oauthProvider(): OAuthClientProvider & { redirects: URL[]; registered: boolean } {
  const provider = {
    redirects: [] as URL[],
    registered: false,
    redirectUrl: 'http://127.0.0.1:1/callback',
    clientMetadata: { client_name: 'kiln-test', redirect_uris: ['http://127.0.0.1:1/callback'] },
    clientInformation: () => undefined,
    saveClientInformation: () => {
      provider.registered = true;
    },
    tokens: () => undefined,
    saveTokens: () => undefined,
    redirectToAuthorization: (url: URL) => {
      provider.redirects.push(url);
    },
    saveCodeVerifier: () => undefined,
    codeVerifier: () => 'verifier',
  };
  return provider;
}

describe('MCP over HTTP asks for the Kiln key, not for OAuth', () => {
  it('a client without a key fails at once with a 401 naming the bearer key wanted', async () => {
    const { error, ms } = await failure(() => connect(transport({})));
    expect(ms).toBeLessThan(2000);
    expect(error).toMatchObject({ code: 401 });
    // The SDK's message quotes the body: the user reads what to do.
    expect(error.message).toContain('Authorization: Bearer <kiln key>');
    expect(error.message).toContain('missing API key');
  });

  it('a refused key gets the same advice, with the reason', async () => {
    const { error } = await failure(() =>
      connect(transport({ Authorization: 'Bearer kiln_sk_notarealkey000000000000000000000' })),
    );
    expect(error).toMatchObject({ code: 401 });
    expect(error.message).toContain('unknown or has been revoked');
    expect(error.message).toContain('Authorization: Bearer <kiln key>');
  });

  it('the 401 challenge names the key and points at no OAuth metadata', async () => {
    const missing = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(missing.status).toBe(401);
    const challenge = missing.headers.get('www-authenticate') ?? '';
    expect(challenge).toMatch(/^Bearer realm="kiln", error_description="[^"]*Bearer <kiln key>[^"]*"$/);
    expect(challenge).not.toContain('resource_metadata');
    const body = (await missing.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('unauthorized');
    expect(body.error.message).toContain('Authorization: Bearer <kiln key>');

    const refused = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { authorization: 'Bearer nope', 'content-type': 'application/json' },
      body: '{}',
    });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer realm="kiln", error="invalid_token", /);
  });

  it('OAuth discovery documents answer 404 JSON', async () => {
    for (const path of [
      '/.well-known/oauth-protected-resource',
      '/.well-known/oauth-protected-resource/mcp',
      '/.well-known/oauth-authorization-server',
      '/.well-known/openid-configuration',
    ]) {
      const response = await fetch(`${server.url}${path}`, { headers: { accept: 'application/json' } });
      expect(response.status, path).toBe(404);
      expect(response.headers.get('content-type'), path).toMatch(/^application\/json/);
      expect(await response.json(), path).toMatchObject({ error: { type: 'not_found_error' } });
    }
  });

  it('an OAuth-capable client finds no authorization server and fails fast, never redirecting', async () => {
    const provider = oauthProvider();
    const { error, ms } = await failure(() => connect(transport({}, provider)));
    expect(ms).toBeLessThan(2000);
    expect(provider.redirects).toEqual([]);
    expect(provider.registered).toBe(false);
    // The SDK says why it stopped: the registration it fell back on does not exist.
    expect(error.message).toMatch(/404/);
  });

  it('with the key, the same client connects and lists the tools', async () => {
    const client = await connect(transport({ Authorization: `Bearer ${key}` }));
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain('list_contexts');
  });
});
