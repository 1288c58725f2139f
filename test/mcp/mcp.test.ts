import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  type CallToolResult,
  CallToolResultSchema,
  ErrorCode,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ContextList, ContextRecord, ContextWithContent } from '../../src/contexts/service.js';
import type { ErrorBody } from '../../src/errors.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * The context store as MCP, driven by the official SDK client: over Streamable HTTP at /mcp on a
 * real gateway, and over stdio through the real `kiln mcp` CLI talking to that same gateway.
 */

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
/** A small cap, so the over-the-cap case is cheap; `é` is 2 bytes, so the check must count bytes. */
const MAX_BYTES = 4096;
const TOOLS = ['delete_context', 'get_context', 'list_contexts', 'save_context'];

let server: TestServer;
let acme: string;
let acmeToo: string;
let globex: string;
const clients: Client[] = [];

beforeAll(async () => {
  server = await startTestServer(storeCases[0] as StoreCase, { 'contexts.max_bytes': MAX_BYTES });
  acme = await server.key('acme');
  acmeToo = await server.key('acme');
  globex = await server.key('globex');
});

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await server?.close();
});

async function connect(transport: StreamableHTTPClientTransport | StdioClientTransport): Promise<Client> {
  const client = new Client({ name: 'kiln-test', version: '0.0.0' });
  clients.push(client);
  await client.connect(transport);
  return client;
}

const httpTransport = (key: string | undefined) =>
  new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: key ? { headers: { Authorization: `Bearer ${key}` } } : {},
  });

const connectHttp = (key: string) => connect(httpTransport(key));

function textOf(result: CallToolResult): string {
  const first = result.content[0];
  if (first?.type !== 'text') throw new Error(`expected text content, got ${JSON.stringify(result)}`);
  return first.text;
}

const callTool = async (client: Client, name: string, args: Record<string, unknown>) =>
  (await client.callTool({ name, arguments: args })) as CallToolResult;

/** A tool call that must succeed; its JSON text, which structuredContent must equal. */
async function ok<T>(client: Client, name: string, args: Record<string, unknown>): Promise<T> {
  const result = await callTool(client, name, args);
  expect(result.isError, textOf(result)).toBeFalsy();
  const parsed = JSON.parse(textOf(result)) as T;
  expect(result.structuredContent).toEqual(parsed);
  return parsed;
}

/** A tool call that must fail as a tool error (isError), not as a protocol error; its error body. */
async function fails(client: Client, name: string, args: Record<string, unknown>): Promise<ErrorBody> {
  const result = await callTool(client, name, args);
  expect(result.isError, textOf(result)).toBe(true);
  const { error } = JSON.parse(textOf(result)) as { error: ErrorBody };
  // The same envelope as HTTP: `param` is always there, null when no field is at fault.
  expect(error, textOf(result)).toHaveProperty('param');
  return error;
}

const names = (list: ContextList) => list.data.map((c) => c.name);

describe('MCP over Streamable HTTP (/mcp)', () => {
  it('lists the four context tools with their input schemas', async () => {
    const client = await connectHttp(acme);
    expect(client.getServerVersion()?.name).toBe('kiln');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS);
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const t of tools) {
      expect(t.description, t.name).toBeTruthy();
      expect(t.inputSchema.type, t.name).toBe('object');
    }
    expect(byName.save_context?.inputSchema).toMatchObject({
      properties: { name: { type: 'string' }, content: { type: 'string' }, description: { type: 'string' } },
      required: ['name', 'content'],
      additionalProperties: false,
    });
    expect(byName.get_context?.inputSchema).toMatchObject({ required: ['id_or_name'] });
    expect(byName.delete_context?.inputSchema).toMatchObject({ required: ['id_or_name'] });
    expect(Object.keys(byName.list_contexts?.inputSchema.properties ?? {}).sort()).toEqual([
      'after',
      'limit',
      'prefix',
    ]);
  });

  it('saves, fetches, lists, reads as a resource and deletes a context', async () => {
    const client = await connectHttp(acme);
    const content = 'deploy: blue/green\nrollback: `kiln rollback` — naïve ✓';

    const saved = await ok<{ context: ContextRecord; created: boolean }>(client, 'save_context', {
      name: 'runbooks/deploy',
      content,
      description: 'how we ship',
    });
    expect(saved.created).toBe(true);
    expect(saved.context).toMatchObject({
      object: 'context',
      name: 'runbooks/deploy',
      description: 'how we ship',
      size_bytes: Buffer.byteLength(content),
      version: 1,
    });
    const id = saved.context.id;
    expect(id).toMatch(/^ctx_/);

    const again = await ok<{ context: ContextRecord; created: boolean }>(client, 'save_context', {
      name: 'runbooks/deploy',
      content,
    });
    expect(again).toMatchObject({ created: false, context: { id, version: 2 } });

    for (const ref of ['runbooks/deploy', id]) {
      const got = await ok<ContextWithContent>(client, 'get_context', { id_or_name: ref });
      expect(got).toMatchObject({ id, name: 'runbooks/deploy', content });
    }

    const list = await ok<ContextList>(client, 'list_contexts', { prefix: 'runbooks/' });
    expect(list).toMatchObject({ object: 'list', has_more: false });
    expect(names(list)).toEqual(['runbooks/deploy']);
    expect(list.data[0]).not.toHaveProperty('content');

    const { resources } = await client.listResources();
    expect(resources).toContainEqual(
      expect.objectContaining({
        uri: `kiln-context://${id}`,
        name: 'runbooks/deploy',
        description: 'how we ship',
        mimeType: 'text/plain',
      }),
    );
    const read = await client.readResource({ uri: `kiln-context://${id}` });
    expect(read.contents).toEqual([{ uri: `kiln-context://${id}`, mimeType: 'text/plain', text: content }]);
    const byName = await client.readResource({ uri: 'kiln-context://runbooks%2Fdeploy' });
    expect(byName.contents[0]).toMatchObject({ text: content });

    const { resourceTemplates } = await client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).toEqual(['kiln-context://{id_or_name}']);

    expect(await ok(client, 'delete_context', { id_or_name: 'runbooks/deploy' })).toEqual({
      id,
      object: 'context',
      deleted: true,
    });
    expect(await fails(client, 'get_context', { id_or_name: id })).toMatchObject({ code: 'not-found' });
    expect(await fails(client, 'delete_context', { id_or_name: id })).toMatchObject({ code: 'not-found' });
    expect(names(await ok<ContextList>(client, 'list_contexts', {}))).not.toContain('runbooks/deploy');
    await expect(client.readResource({ uri: `kiln-context://${id}` })).rejects.toThrow(/no context/);
    // MCP's code for a resource that does not exist, not a generic internal error; a reference no
    // context can have, a malformed escape included, is one.
    for (const ref of [id, '%', 'a%2', '%E0%A4%A', 'a%20b'])
      await expect(client.readResource({ uri: `kiln-context://${ref}` }), ref).rejects.toMatchObject({
        code: -32002,
      });
  });

  it('shares a context with the whole organisation, and with no other', async () => {
    const mine = await connectHttp(acme);
    const theirs = await connectHttp(globex);
    const { context } = await ok<{ context: ContextRecord }>(mine, 'save_context', {
      name: 'shared-spec',
      content: 'acme only',
    });

    // Another key of the same organisation sees it over the plain HTTP API.
    const viaApi = await server.call('GET', '/api/v1/contexts/shared-spec', { key: acmeToo });
    expect(viaApi.status).toBe(200);
    expect(viaApi.body).toMatchObject({
      id: context.id,
      content: 'acme only',
      created_by: expect.any(String),
    });

    // Another organisation neither reads, lists nor deletes it, by name or by id.
    for (const ref of ['shared-spec', context.id]) {
      expect(await fails(theirs, 'get_context', { id_or_name: ref })).toMatchObject({ code: 'not-found' });
      expect(await fails(theirs, 'delete_context', { id_or_name: ref })).toMatchObject({ code: 'not-found' });
    }
    expect(names(await ok<ContextList>(theirs, 'list_contexts', {}))).not.toContain('shared-spec');
    const { resources } = await theirs.listResources();
    expect(resources.map((r) => r.uri)).not.toContain(`kiln-context://${context.id}`);
    await expect(theirs.readResource({ uri: `kiln-context://${context.id}` })).rejects.toThrow(/no context/);
    expect((await server.call('GET', '/api/v1/contexts/shared-spec', { key: globex })).status).toBe(404);

    // ...and can keep a context of the same name without touching acme's.
    await ok(theirs, 'save_context', { name: 'shared-spec', content: 'globex own' });
    expect((await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'shared-spec' })).content).toBe(
      'acme only',
    );
  });

  it('with create_only, saves a new context but never replaces a teammate’s', async () => {
    const mine = await connectHttp(acme);
    const teammate = await connectHttp(acmeToo);
    const first = await ok<{ context: ContextRecord; created: boolean }>(mine, 'save_context', {
      name: 'only-once',
      content: 'the original',
      create_only: true,
    });
    expect(first).toMatchObject({ created: true, context: { version: 1 } });
    const error = await fails(teammate, 'save_context', {
      name: 'only-once',
      content: 'an agent’s rewrite',
      create_only: true,
    });
    expect(error).toMatchObject({ code: 'context-exists', param: 'create_only' });
    expect(error.message).toContain("a context named 'only-once' exists already (version 1");
    expect((await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'only-once' })).content).toBe(
      'the original',
    );
    const replaced = await ok(teammate, 'save_context', {
      name: 'only-once',
      content: 'replaced',
      create_only: false,
    });
    expect(replaced).toMatchObject({ created: false, context: { version: 2 } });
  });

  it('with if_match, replaces only the version it read, never a teammate’s newer one', async () => {
    const mine = await connectHttp(acme);
    const teammate = await connectHttp(acmeToo);
    const first = await ok<{ context: ContextRecord; etag: string }>(mine, 'save_context', {
      name: 'shared/plan',
      content: 'step 1',
    });
    expect(first.etag).toBe(`${first.context.id}.1`);
    const read = await ok<ContextWithContent & { etag: string }>(mine, 'get_context', {
      id_or_name: 'shared/plan',
    });
    expect(read.etag).toBe(`${first.context.id}.1`);

    // A teammate saves while the agent works on what it read.
    await ok(teammate, 'save_context', { name: 'shared/plan', content: 'step 1\nstep 2 (teammate)' });
    const error = await fails(mine, 'save_context', {
      name: 'shared/plan',
      content: 'step 1\nstep 2 (agent)',
      if_match: read.etag,
    });
    expect(error.code).toBe('context-changed');
    expect(error.message).toContain(
      "context 'shared/plan' is not the version this save was based on: it is at version 2",
    );
    // The current record comes with the error, as HTTP's 412 attaches it.
    const raw = await callTool(mine, 'save_context', {
      name: 'shared/plan',
      content: 'x',
      if_match: read.etag,
    });
    // In the tool's terms: the argument at fault, and the current version's etag for the next try.
    expect(JSON.parse(textOf(raw))).toMatchObject({
      error: { code: 'context-changed', param: 'if_match' },
      context: { id: first.context.id, version: 2, etag: `${first.context.id}.2` },
    });
    expect((await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'shared/plan' })).content).toBe(
      'step 1\nstep 2 (teammate)',
    );

    // Read again, redo the edit on it: saved over that version.
    const fresh = await ok<{ etag: string }>(mine, 'get_context', { id_or_name: 'shared/plan' });
    const saved = await ok<{ context: ContextRecord; etag: string }>(mine, 'save_context', {
      name: 'shared/plan',
      content: 'step 1\nstep 2 (teammate)\nstep 3 (agent)',
      if_match: fresh.etag,
    });
    expect(saved).toMatchObject({ created: false, context: { version: 3 }, etag: `${first.context.id}.3` });

    // A tag of another context, or of a context since deleted and re-created, matches nothing.
    const other = await ok<{ etag: string }>(mine, 'save_context', { name: 'other', content: 'x' });
    expect(
      (await fails(mine, 'save_context', { name: 'shared/plan', content: 'y', if_match: other.etag })).code,
    ).toBe('context-changed');
    await ok(mine, 'delete_context', { id_or_name: 'other' });
    await ok(teammate, 'save_context', { name: 'other', content: 're-created' });
    expect(
      (await fails(mine, 'save_context', { name: 'other', content: 'z', if_match: other.etag })).code,
    ).toBe('context-changed');
    expect((await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'other' })).content).toBe(
      're-created',
    );

    for (const [args, rule] of [
      [{ if_match: saved.etag, create_only: true }, 'conflict'],
      [{ if_match: `"${saved.etag}"` }, 'pattern'],
      [{ if_match: '*' }, 'pattern'],
    ] as const) {
      const refused = await fails(mine, 'save_context', { name: 'shared/plan', content: 'nope', ...args });
      expect(refused.code, JSON.stringify(args)).toBe('validation-failed');
      expect(refused.details?.[0], JSON.stringify(args)).toMatchObject({ field: 'if_match', rule });
    }
    expect((await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'shared/plan' })).version).toBe(
      3,
    );
  });

  it('with if_match, deletes only the version it read, never a teammate’s newer one', async () => {
    const mine = await connectHttp(acme);
    const teammate = await connectHttp(acmeToo);
    const read = await ok<{ context: ContextRecord; etag: string }>(mine, 'save_context', {
      name: 'shared/old-plan',
      content: 'obsolete',
    });
    await ok(teammate, 'save_context', { name: 'shared/old-plan', content: 'revived by a teammate' });

    const raw = await callTool(mine, 'delete_context', {
      id_or_name: 'shared/old-plan',
      if_match: read.etag,
    });
    expect(JSON.parse(textOf(raw))).toMatchObject({
      error: { code: 'context-changed', param: 'if_match' },
      context: { id: read.context.id, version: 2, etag: `${read.context.id}.2` },
    });
    expect(textOf(raw)).toContain('Nothing was deleted');
    expect(
      (await ok<ContextWithContent>(mine, 'get_context', { id_or_name: 'shared/old-plan' })).content,
    ).toBe('revived by a teammate');

    const refused = await fails(mine, 'delete_context', { id_or_name: 'shared/old-plan', if_match: '*' });
    expect(refused.details?.[0]).toMatchObject({ field: 'if_match', rule: 'pattern' });

    // The version it read now: deleted, by id as by name.
    expect(
      await ok(mine, 'delete_context', { id_or_name: read.context.id, if_match: `${read.context.id}.2` }),
    ).toEqual({ id: read.context.id, object: 'context', deleted: true });
    expect(await fails(mine, 'get_context', { id_or_name: 'shared/old-plan' })).toMatchObject({
      code: 'not-found',
    });
  });

  it('answers bad tool input with validation-failed and details, not a protocol error', async () => {
    const client = await connectHttp(acme);
    const cases: Array<{ tool: string; args: Record<string, unknown>; field: string; rule: string }> = [
      { tool: 'save_context', args: { name: 'ctx_bad', content: 'x' }, field: 'name', rule: 'pattern' },
      { tool: 'save_context', args: { name: 'bad name!', content: 'x' }, field: 'name', rule: 'pattern' },
      { tool: 'save_context', args: { name: 'team/../prod', content: 'x' }, field: 'name', rule: 'pattern' },
      { tool: 'save_context', args: { name: 'n', content: 42 }, field: 'content', rule: 'type' },
      { tool: 'save_context', args: { name: 'n' }, field: 'content', rule: 'required' },
      {
        tool: 'save_context',
        args: { name: 'n', content: 'x', colour: 'red' },
        field: 'colour',
        rule: 'unknown-field',
      },
      { tool: 'get_context', args: {}, field: 'id_or_name', rule: 'required' },
      { tool: 'list_contexts', args: { limit: 0 }, field: 'limit', rule: 'minimum' },
      { tool: 'list_contexts', args: { limit: '5' }, field: 'limit', rule: 'type' },
    ];
    for (const c of cases) {
      const error = await fails(client, c.tool, c.args);
      const label = `${c.tool} ${JSON.stringify(c.args)}`;
      expect(error.code, label).toBe('validation-failed');
      expect(error.message, label).toBeTruthy();
      expect(error.details, label).toContainEqual(expect.objectContaining({ field: c.field, rule: c.rule }));
    }

    // None of it stored anything, and the session is still usable.
    const list = await ok<ContextList>(client, 'list_contexts', { limit: 100 });
    expect(names(list)).not.toContain('n');
    expect(names(list)).not.toContain('ctx_bad');
  });

  it('answers an unknown tool, Object.prototype names included, with MCP’s unknown-tool error', async () => {
    const client = await connectHttp(acme);
    for (const name of [
      'no_such_tool',
      '__proto__',
      'constructor',
      'toString',
      'hasOwnProperty',
      'valueOf',
    ]) {
      const call = client.callTool({ name, arguments: {} });
      await expect(call, name).rejects.toBeInstanceOf(McpError);
      await expect(call, name).rejects.toMatchObject({
        code: ErrorCode.InvalidParams,
        message: expect.stringContaining(`Unknown tool: ${name}`),
      });
    }
    // The session is still usable, and the real tools are still there.
    expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual(TOOLS);
  });

  it('refuses content over contexts.max_bytes (counted in bytes) and stores nothing', async () => {
    const client = await connectHttp(acme);
    const tooBig = 'é'.repeat(MAX_BYTES / 2 + 1); // 2 bytes each: fewer characters than the cap, more bytes
    expect(tooBig.length).toBeLessThan(MAX_BYTES);

    const error = await fails(client, 'save_context', { name: 'too-big', content: tooBig });
    expect(error.code).toBe('context-too-large');
    expect(error.details).toContainEqual(
      expect.objectContaining({
        field: 'content',
        rule: 'max_bytes',
        limit: MAX_BYTES,
        received: MAX_BYTES + 2,
      }),
    );
    expect(await fails(client, 'get_context', { id_or_name: 'too-big' })).toMatchObject({
      code: 'not-found',
    });

    // Exactly at the cap is fine.
    const atCap = await ok<{ context: ContextRecord }>(client, 'save_context', {
      name: 'at-cap',
      content: 'é'.repeat(MAX_BYTES / 2),
    });
    expect(atCap.context.size_bytes).toBe(MAX_BYTES);
  });

  it('requires a bearer key', async () => {
    await expect(connect(httpTransport(undefined))).rejects.toMatchObject({ code: 401 });
    await expect(connect(httpTransport('kiln_sk_notarealkey000000000000000000000'))).rejects.toMatchObject({
      code: 401,
    });

    const response = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(response.status).toBe(401);
    expect(response.headers.get('www-authenticate')).toMatch(/^Bearer realm="kiln", /);
    expect(await response.json()).toEqual({
      error: expect.objectContaining({
        code: 'unauthorized',
        type: 'authentication_error',
        message: expect.any(String),
      }),
    });
  });

  it('answers params that do not fit a method with -32602 Invalid params, saying what is wrong', async () => {
    /** One JSON-RPC POST with the key, as it is (the SDK client checks its own params first). */
    const post = (body: unknown) =>
      fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${acme}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify(body),
      });
    const rpc = async (method: string, params?: unknown) => {
      const response = await post({
        jsonrpc: '2.0',
        id: 7,
        method,
        ...(params === undefined ? {} : { params }),
      });
      expect(response.status).toBe(200);
      return (await response.json()) as { id: number; error?: { code: number; message: string } };
    };
    for (const [method, params, field] of [
      ['tools/call', { name: 'get_context', arguments: null }, 'params.arguments'],
      ['tools/call', { name: 5 }, 'params.name'],
      ['tools/call', undefined, 'params'],
      ['resources/read', { uri: 5 }, 'params.uri'],
      ['resources/list', { cursor: 5 }, 'params.cursor'],
    ] as const) {
      const answer = await rpc(method, params);
      expect(answer.id).toBe(7);
      expect(answer.error?.code, `${method} ${JSON.stringify(params)}`).toBe(-32602);
      expect(answer.error?.message).toMatch(new RegExp(`^Invalid params: ${field.replace('.', '\\.')}: `));
    }
    // A batch that repeats an id: its second answer cannot be sent, and the gateway goes on.
    const bad = { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 5 } };
    const batch = await post([bad, bad]);
    expect(batch.status).toBe(200);
    // One answer: the id's first; the second could not be sent.
    expect(await batch.json()).toMatchObject({ id: 9, error: { code: -32602 } });
    // Params that fit still reach the server, which answers as before.
    const listed = await rpc('tools/list');
    expect(listed.error).toBeUndefined();
    const unknown = await rpc('tools/call', { name: 'no_such_tool', arguments: {} });
    expect(unknown.error).toMatchObject({ code: -32602, message: expect.stringContaining('no_such_tool') });
  });

  it('answers GET /mcp with 405: the endpoint is stateless', async () => {
    const response = await server.call('GET', '/mcp', { key: acme });
    expect(response.status).toBe(405);
    expect(response.body).toMatchObject({ error: { code: 'method-not-allowed' } });
  });
});

describe('MCP over stdio (kiln mcp)', () => {
  let client: Client;
  let stderr = '';

  beforeAll(async () => {
    if (!existsSync(`${repoRoot}/dist/cli/main.js`)) {
      throw new Error('bin/kiln.js runs dist/: run `npm run build` before these tests');
    }
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['bin/kiln.js', 'mcp'],
      cwd: repoRoot,
      env: { ...process.env, KILN_BASE_URL: server.url, KILN_API_KEY: acme } as Record<string, string>,
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    client = await connect(transport);
  });

  it('serves the same tools, and a context saved through it lands in the shared store', async () => {
    expect(client.getServerVersion()?.name, stderr).toBe('kiln');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS);

    const content = '# schema\nid: uuid\nname: text — ✓';
    const saved = await ok<{ context: ContextRecord; created: boolean }>(client, 'save_context', {
      name: 'stdio/schema',
      content,
      description: 'via stdio',
    });
    expect(saved).toMatchObject({ created: true, context: { name: 'stdio/schema', version: 1 } });
    const id = saved.context.id;

    const got = await ok<ContextWithContent>(client, 'get_context', { id_or_name: 'stdio/schema' });
    expect(got).toMatchObject({ id, content, etag: `${id}.1` });
    // if_match travels to the gateway as If-Match: the version read is replaced, a stale one is not.
    expect(
      await ok(client, 'save_context', {
        name: 'stdio/schema',
        content,
        if_match: `${id}.1`,
      }),
    ).toMatchObject({ context: { version: 2 }, etag: `${id}.2` });
    const stale = await callTool(client, 'save_context', {
      name: 'stdio/schema',
      content: 'stale',
      if_match: `${id}.1`,
    });
    expect(JSON.parse(textOf(stale))).toMatchObject({
      error: { code: 'context-changed', param: 'if_match' },
      context: { id, version: 2, etag: `${id}.2` },
    });
    expect(names(await ok<ContextList>(client, 'list_contexts', { prefix: 'stdio/' }))).toEqual([
      'stdio/schema',
    ]);

    const { resources } = await client.listResources();
    expect(resources).toContainEqual(
      expect.objectContaining({ uri: `kiln-context://${id}`, name: 'stdio/schema' }),
    );
    const read = await client.readResource({ uri: `kiln-context://${id}` });
    expect(read.contents[0]).toMatchObject({ text: content });

    // The stdio server is a client of the gateway: the HTTP API and /mcp see the same context.
    const viaApi = await server.call('GET', `/api/v1/contexts/${id}`, { key: acmeToo });
    expect(viaApi.status).toBe(200);
    expect(viaApi.body).toMatchObject({ name: 'stdio/schema', content });
    const overHttp = await connectHttp(acmeToo);
    expect(await ok(overHttp, 'get_context', { id_or_name: 'stdio/schema' })).toMatchObject({ id, content });

    // Deleting through stdio removes it for everyone; with if_match, only the version read.
    const staleDelete = await callTool(client, 'delete_context', { id_or_name: id, if_match: `${id}.1` });
    expect(JSON.parse(textOf(staleDelete))).toMatchObject({
      error: { code: 'context-changed', param: 'if_match' },
      context: { id, version: 2, etag: `${id}.2` },
    });
    await ok(client, 'delete_context', { id_or_name: id, if_match: `${id}.2` });
    expect((await server.call('GET', `/api/v1/contexts/${id}`, { key: acme })).status).toBe(404);
  });

  it('answers a prototype name as an unknown tool', async () => {
    await expect(client.callTool({ name: '__proto__', arguments: {} })).rejects.toMatchObject({
      code: ErrorCode.InvalidParams,
      message: expect.stringContaining('Unknown tool: __proto__'),
    });
  });

  it('answers params that do not fit a method with -32602 Invalid params, as /mcp does', async () => {
    await expect(
      client.request(
        { method: 'tools/call', params: { name: 'get_context', arguments: null } } as never,
        CallToolResultSchema,
      ),
    ).rejects.toMatchObject({
      code: ErrorCode.InvalidParams,
      message: expect.stringContaining('Invalid params: params.arguments: '),
    });
  });

  it('validates tool input locally with the same details', async () => {
    const error = await fails(client, 'save_context', { name: 'ctx_bad', content: 1 });
    expect(error.code).toBe('validation-failed');
    expect(error.details?.map((d) => d.field).sort()).toEqual(['content', 'name']);
  });

  it('passes the gateway’s own error codes through', async () => {
    expect(await fails(client, 'get_context', { id_or_name: 'stdio/missing' })).toMatchObject({
      code: 'not-found',
    });
    const error = await fails(client, 'save_context', {
      name: 'stdio/big',
      content: 'x'.repeat(MAX_BYTES + 1),
    });
    expect(error).toMatchObject({ code: 'context-too-large' });
    await ok(client, 'save_context', { name: 'stdio/once', content: 'kept', create_only: true });
    const taken = await fails(client, 'save_context', {
      name: 'stdio/once',
      content: 'lost?',
      create_only: true,
    });
    expect(taken).toMatchObject({ code: 'context-exists', param: 'create_only' });
    expect((await server.call('GET', '/api/v1/contexts/stdio/once', { key: acme })).body.content).toBe(
      'kept',
    );
  });
});
