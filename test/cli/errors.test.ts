import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KILN_BIN, type Kiln, kilnWith } from '../helpers/cli.js';
import { closedPort } from '../helpers/ports.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * The CLI's network failures say where it looked and what to check, and keep "could not connect"
 * (no gateway ever answered) apart from "the gateway answered an error".
 */

let cwd: string;
let down: string;
let server: TestServer;
let key: string;
let run: Kiln;
const refused = 'connection refused, nothing is listening there (ECONNREFUSED)';

beforeAll(async () => {
  cwd = mkdtempSync(path.join(tmpdir(), 'kiln-cli-errors-'));
  down = `http://127.0.0.1:${await closedPort()}`;
  server = await startTestServer(storeCases[0] as StoreCase);
  key = await server.key('acme');
  run = kilnWith({ cwd, env: { KILN_DATA_DIR: cwd } });
});

afterAll(async () => {
  await server?.close();
  rmSync(cwd, { recursive: true, force: true });
});

describe('CLI: the gateway cannot be reached', () => {
  it.each([
    [['ctx', 'list'], '/api/v1/contexts'],
    [['ctx', 'get', 'house-style'], '/api/v1/contexts/house-style'],
    [['jobs', 'list'], '/v1/jobs'],
    [['chat', '--persona', 'fast', 'hello'], '/v1/chat/completions'],
    [['chat', '--list'], '/v1/models'],
  ])('kiln %j names the URL tried and what to check', async (args, route) => {
    const result = await run(args, { env: { KILN_BASE_URL: down, KILN_API_KEY: 'kiln_sk_any' } });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `kiln: could not connect to ${down}${route}: ${refused}\n` +
        `  Is the Kiln gateway (\`kiln serve\`) running at ${down}? The address comes from KILN_BASE_URL.\n`,
    );
  });

  it('a base URL under a path is named as given', async () => {
    const result = await run(['ctx', 'list'], {
      env: { KILN_BASE_URL: `${down}/kiln/`, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`could not connect to ${down}/kiln/api/v1/contexts: ${refused}`);
    expect(result.stderr).toContain(`running at ${down}/kiln?`);
  });

  it.each([
    [
      ['ctx', 'list', '--limit', 'abc'],
      "'--limit <n>' argument 'abc' is invalid. expected a whole number from 1 to 100",
    ],
    [['ctx', 'list', '--limit', '101'], "'--limit <n>' argument '101' is invalid"],
    [
      ['dev', '--sim-port', 'abc'],
      "'--sim-port <port>' argument 'abc' is invalid. expected a whole number from 0 to 65535",
    ],
  ])('kiln %j names the flag it refuses, before any request', async (args, words) => {
    const result = await run(args, { env: { KILN_BASE_URL: down, KILN_API_KEY: 'kiln_sk_any' } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(words);
    expect(result.stderr).not.toContain('could not connect');
  });

  it('a KILN_BASE_URL that is not an http(s) URL is refused before any request', async () => {
    const result = await run(['ctx', 'list'], {
      env: { KILN_BASE_URL: '127.0.0.1:8080', KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `kiln: KILN_BASE_URL must be the gateway's http(s) URL, such as http://127.0.0.1:8080; it is "127.0.0.1:8080"\n`,
    );
  });
});

describe('CLI: the gateway answered an error', () => {
  it('a key it does not know: its answer, and the key to check', async () => {
    const result = await run(['ctx', 'list'], {
      env: { KILN_BASE_URL: server.url, KILN_API_KEY: 'kiln_sk_notarealkey000000000000000000000' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      'kiln: unauthorized (HTTP 401): the API key is unknown or has been revoked\n' +
        `  the gateway at ${server.url} did not accept the key: check KILN_API_KEY\n`,
    );
    // Without KILN_API_KEY the key came from the data directory's admin.key: that is named instead.
    const dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-stale-key-'));
    try {
      writeFileSync(path.join(dataDir, 'admin.key'), 'kiln_sk_notarealkey000000000000000000000\n');
      const fallen = await run(['ctx', 'list'], {
        env: { KILN_BASE_URL: server.url, KILN_API_KEY: undefined, KILN_DATA_DIR: dataDir },
      });
      expect(fallen.code).toBe(1);
      expect(fallen.stderr).toContain(
        `did not accept the key: check ${path.join(dataDir, 'admin.key')}, used as KILN_API_KEY is unset\n`,
      );
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('a base URL with /v1 on it: the route it asked for, and the base URL to check', async () => {
    const result = await run(['ctx', 'list'], {
      env: { KILN_BASE_URL: `${server.url}/v1`, KILN_API_KEY: key },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      'kiln: route-not-found (HTTP 404): no route GET /v1/api/v1/contexts\n' +
        `  ${server.url}/v1/api/v1/contexts is not a route of a Kiln gateway: check that KILN_BASE_URL is the gateway's address, without /v1\n`,
    );
  });

  it('an answer about the request itself stays one line', async () => {
    const result = await run(['ctx', 'get', 'no-such-context'], {
      env: { KILN_BASE_URL: server.url, KILN_API_KEY: key },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      "kiln: not-found (HTTP 404): no context 'no-such-context' in this organisation\n",
    );
  });
});

describe('CLI: something other than a Kiln gateway answered', () => {
  let foreign: Server;
  let base: string;

  beforeAll(async () => {
    // What else may sit at KILN_BASE_URL: an OpenAI-compatible engine, a Fastify app, a proxy's login page.
    foreign = createServer((request, response) => {
      const answer = (status: number, type: string, body: string) => {
        response.writeHead(status, { 'content-type': type });
        response.end(body);
      };
      const url = request.url ?? '';
      if (url.startsWith('/engine/')) {
        const error = { message: 'The model `nope` does not exist.', type: 'NotFoundError', code: 404 };
        return answer(404, 'application/json', JSON.stringify({ error }));
      }
      if (url.startsWith('/engine-null/')) {
        const error = { message: 'no such model', type: 'invalid_request_error', param: null, code: null };
        return answer(404, 'application/json', JSON.stringify({ object: 'error', error }));
      }
      if (url.startsWith('/details-object/')) {
        const error = { code: 'invalid_request', message: 'bad thing', details: { field: 'x' } };
        return answer(400, 'application/json', JSON.stringify({ error }));
      }
      if (url.startsWith('/fastify/')) {
        const message = `Route ${request.method}:${url} not found`;
        return answer(
          404,
          'application/json',
          JSON.stringify({ message, error: 'Not Found', statusCode: 404 }),
        );
      }
      answer(200, 'text/html; charset=utf-8', '<html>\n<body>Sign in</body>\n</html>\n');
    });
    await new Promise<void>((resolve) => foreign.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(foreign.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise((resolve) => foreign?.close(resolve));
  });

  const notARoute = (url: string) =>
    `  ${url} is not a route of a Kiln gateway: check that KILN_BASE_URL is the gateway's address, without /v1\n`;

  it.each([
    [
      'an OpenAI-compatible engine',
      '/engine',
      ['chat', '--model', 'nope', 'hi'],
      '/v1/chat/completions',
      'The model `nope` does not exist.',
    ],
    [
      'an engine whose code is null',
      '/engine-null',
      ['chat', '--model', 'nope', 'hi'],
      '/v1/chat/completions',
      'no such model',
    ],
    [
      'Fastify',
      '/fastify',
      ['jobs', 'get', 'abc'],
      '/v1/jobs/abc',
      'Route GET:/fastify/v1/jobs/abc not found',
    ],
  ])(
    'an error answer of %s: its message as http-<status>, no stack trace',
    async (_, prefix, args, route, message) => {
      const result = await run(args, {
        env: { KILN_BASE_URL: `${base}${prefix}`, KILN_API_KEY: 'kiln_sk_any' },
      });
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `kiln: http-404 (HTTP 404): ${message}\n${notARoute(`${base}${prefix}${route}`)}`,
      );
    },
  );

  it("an error answer shaped almost like Kiln's, its details not a list: its message, no stack trace", async () => {
    const result = await run(['jobs', 'get', 'abc'], {
      env: { KILN_BASE_URL: `${base}/details-object`, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^kiln: http-400 \(HTTP 400\): bad thing\n/);
    expect(result.stderr).not.toContain('TypeError');
  });

  it.each([
    [['jobs', 'get', 'abc'], '/v1/jobs/abc'],
    [['jobs', 'wait', 'abc'], '/v1/jobs/abc'],
    [['chat', '--model', 'm', 'hi'], '/v1/chat/completions'],
    [['chat', '--list'], '/v1/models'],
    [['video', 'generate', '--prompt', 'waves'], '/v1/videos/generations'],
    [['images', 'generate', '--prompt', 'a cup'], '/v1/images/generations'],
  ])(
    'a 200 that is not JSON (a login page) fails kiln %j, naming the URL and what to check',
    async (args, route) => {
      const result = await run(args, {
        env: { KILN_BASE_URL: `${base}/proxy`, KILN_API_KEY: 'kiln_sk_any' },
      });
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `kiln: invalid-answer (HTTP 200): ${base}/proxy${route} answered 200 with text/html (<html> <body>Sign in</body> </html>), not a Kiln gateway's JSON\n` +
          `  something other than a Kiln gateway answered at ${base} (a proxy's login page, another service?): check that KILN_BASE_URL is the gateway's address\n`,
      );
    },
  );
});

const ENGINE_MODEL = { id: 'sim-llama-3-8b', object: 'model', created: 1, owned_by: 'vllm' };

describe('CLI: another service answers JSON objects of its own', () => {
  let other: Server;
  let base: string;
  beforeAll(async () => {
    other = createServer((request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      // An engine's model list, as vLLM answers it: OpenAI's shape, without Kiln's kind and ready.
      if (request.url === '/v1/models')
        response.end(JSON.stringify({ object: 'list', data: [ENGINE_MODEL] }));
      else response.end('{"ok":true}');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    other.closeAllConnections();
    await new Promise((resolve) => other?.close(resolve));
  });

  it.each([
    [['ctx', 'save', '--name', 'a', '-c', 'b'], '/api/v1/contexts'],
    [['ctx', 'list'], '/api/v1/contexts'],
    [['jobs', 'get', 'x'], '/v1/jobs/x'],
    [['jobs', 'wait', 'x'], '/v1/jobs/x'],
    [['jobs', 'list'], '/v1/jobs?limit=20'],
    [['chat', '--model', 'm', '--no-stream', 'hi'], '/v1/chat/completions'],
    [['video', 'generate', '--prompt', 'waves'], '/v1/videos/generations'],
    [['images', 'generate', '--prompt', 'a cup'], '/v1/images/generations'],
  ])('kiln %j fails, naming the answer, rather than printing undefined', async (args, route) => {
    const result = await run(args, { env: { KILN_BASE_URL: base, KILN_API_KEY: 'kiln_sk_any' } });
    expect([result.code, result.stdout]).toEqual([1, '']);
    expect(result.stderr).toContain(
      `kiln: invalid-answer (HTTP 200): ${base}${route.split('?')[0]} answered 200 with application/json ({"ok":true}), not a Kiln gateway's JSON\n`,
    );
  });

  it('kiln chat --stream against JSON that is no event stream says so, not that a stream was cut', async () => {
    const result = await run(['chat', '--model', 'm', '--stream', 'hi'], {
      env: { KILN_BASE_URL: base, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect([result.code, result.stdout]).toEqual([1, '']);
    expect(result.stderr).toContain(
      `kiln: invalid-answer (HTTP 200): ${base}/v1/chat/completions answered 200 with application/json ({"ok":true}), not an event stream\n`,
    );
    expect(result.stderr).toContain('check that KILN_BASE_URL is the gateway');
  });

  it("kiln chat --list against an engine's model list (no kind, no readiness) says it is not Kiln's", async () => {
    const result = await run(['chat', '--list'], {
      env: { KILN_BASE_URL: base, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect([result.code, result.stdout]).toEqual([1, '']);
    expect(result.stderr).toContain(`kiln: invalid-answer (HTTP 200): ${base}/v1/models answered 200`);
    expect(result.stderr).toContain('check that KILN_BASE_URL is the gateway');
    expect(result.stderr).not.toContain('TypeError');
    expect(result.stderr).not.toContain('padEnd');
  });
});

describe('kiln mcp: the gateway cannot be reached', () => {
  let client: Client;
  let stderr = '';

  beforeAll(async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [KILN_BIN, 'mcp'],
      cwd,
      env: { PATH: process.env.PATH ?? '', KILN_BASE_URL: down, KILN_API_KEY: 'kiln_sk_any' },
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    client = new Client({ name: 'kiln-test', version: '0.0.0' });
    // The server starts without the gateway: it is reached only when a tool runs.
    await client.connect(transport);
  });

  afterAll(async () => {
    await client?.close();
  });

  it('a tool call says it could not connect, with the URL, not "the gateway logs say why"', async () => {
    const result = (await client.callTool({ name: 'list_contexts', arguments: {} })) as CallToolResult;
    expect(result.isError).toBe(true);
    const first = result.content[0];
    const { error } = JSON.parse(first?.type === 'text' ? first.text : '{}') as {
      error: { code: string; type: string; message: string };
    };
    expect(error).toMatchObject({ code: 'gateway-unreachable', type: 'connection_error' });
    expect(error.message).toBe(
      `could not connect to ${down}/api/v1/contexts: ${refused}. ` +
        `Is the Kiln gateway (\`kiln serve\`) running at ${down}? The address comes from KILN_BASE_URL.`,
    );
    expect(error.message).not.toContain('gateway logs');
    expect(stderr).toBe('');
  });

  it('reading a resource fails with the same words', async () => {
    await expect(client.readResource({ uri: 'kiln-context://house-style' })).rejects.toThrow(
      `could not connect to ${down}/api/v1/contexts/house-style: ${refused}`,
    );
  });
});

describe('CLI: a gateway that is slow to answer', () => {
  /**
   * A stand-in that answers a sync chat after `chatMs`, begins a list of contexts and stops half-way,
   * and never answers anything else.
   */
  async function standIn(chatMs: number): Promise<{ url: string; close(): Promise<void> }> {
    const gateway = createServer((request, response) => {
      if (request.url?.startsWith('/api/v1/contexts')) {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.write('{"object":"list","data":[');
        return;
      }
      if (request.method !== 'POST') return; // never answered
      request.resume();
      setTimeout(() => {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify({
            id: 'chatcmpl-1',
            object: 'chat.completion',
            created: 1,
            model: 'm',
            choices: [
              { index: 0, message: { role: 'assistant', content: 'late but whole' }, finish_reason: 'stop' },
            ],
          }),
        );
      }, chatMs);
    });
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`,
      close: async () => {
        gateway.closeAllConnections();
        await new Promise((resolve) => gateway.close(resolve));
      },
    };
  }

  it('a request that waits for work takes as long as the work; any other fails after KILN_TIMEOUT', async () => {
    const gateway = await standIn(2500);
    try {
      const env = { KILN_BASE_URL: gateway.url, KILN_API_KEY: 'kiln_sk_any', KILN_TIMEOUT: '1.0001' };
      // The answer comes after 2.5 s, past the 1 s limit for answers that do not wait for work.
      const chat = await run(['chat', '--model', 'm', '--no-stream', 'hi'], { env });
      expect([chat.code, chat.stdout, chat.stderr]).toEqual([0, 'late but whole\n', '']);

      const started = Date.now();
      const polled = await run(['jobs', 'get', 'x'], { env });
      expect(polled.code).toBe(1);
      expect(polled.stderr).toContain('no answer came in time (UND_ERR_HEADERS_TIMEOUT)');
      // An answer that begins and then stops is cut too, and says so.
      const listed = await run(['ctx', 'list'], { env });
      expect(listed.code).toBe(1);
      expect(listed.stderr).toContain('the answer stopped coming in time (UND_ERR_BODY_TIMEOUT)');
      expect(Date.now() - started).toBeLessThan(10_000);

      const bad = await run(['ctx', 'list'], { env: { ...env, KILN_TIMEOUT: 'soon' } });
      expect([bad.code, bad.stderr]).toEqual([
        1,
        'kiln: KILN_TIMEOUT must be a number of seconds above 0; it is "soon"\n',
      ]);
    } finally {
      await gateway.close();
    }
  });
});
