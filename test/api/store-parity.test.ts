import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * The two stores give the same answer to every input, never a 500: a table of NUL characters,
 * `%00` and out-of-range numbers sent to every endpoint that takes text or numbers, each sent to a
 * server on SQLite and one on PostgreSQL.
 */

const NUL = 'a\u0000b';
/** Query-string numbers: overflowing a double, negative, 2^63, not numbers at all. */
const BAD_NUMBERS = ['1e309', '-1', '9223372036854775808', 'NaN', 'abc', '1.5', '', '%00'];
/** The same as JSON number literals (and look-alikes) in a body. */
const BAD_JSON_NUMBERS = [
  '1e309',
  '-1',
  '9223372036854775808',
  '-9223372036854775809',
  '"NaN"',
  '"abc"',
  '1.5',
];

interface Case {
  name: string;
  method: string;
  /** `{file}`, `{job}` and `{context}` stand for a real file, job and context id of the server's store. */
  route: string;
  /** A raw JSON text, or a value to send as JSON. */
  body?: unknown;
  /** The status both stores must answer, when the test pins one; and `param`, when it is a 400. */
  status?: number;
  param?: string | null;
}

const q = (value: string) => encodeURIComponent(value);
const nulQuery = (route: string, names: string[]): Case[] =>
  names.map((name) => ({
    name: `GET ${route}?${name}=a%00b`,
    method: 'GET',
    route: `${route}?${name}=${q(NUL)}`,
    status: 400,
    param: name,
  }));
const numberQuery = (route: string, names: string[], extra = ''): Case[] =>
  names.flatMap((name) =>
    BAD_NUMBERS.map((n) => ({
      name: `GET ${route}?${name}=${n}`,
      method: 'GET',
      route: `${route}?${extra}${name}=${n === '%00' ? n : q(n)}`,
      status: 400,
      param: name,
    })),
  );
/** References in the path: NUL in names and ids of each kind, and one longer than any id. */
const nulPath = (method: string, route: (ref: string) => string): Case[] =>
  ['a%00b', '%00', 'ctx_%00', 'file_%00', `${'a'.repeat(300)}%00`].map((ref) => ({
    name: `${method} ${route(ref.length > 20 ? `a×300%00` : ref)}`,
    method,
    route: route(ref),
  }));
const nulBody = (route: string, base: Record<string, unknown>, fields: string[]): Case[] =>
  fields.map((field) => {
    const path = field.split('.');
    const body = structuredClone(base);
    let at: Record<string, unknown> = body;
    for (const part of path.slice(0, -1)) at = at[part] as Record<string, unknown>;
    const last = path.at(-1) as string;
    at[last] = Array.isArray(at[last]) ? [NUL] : NUL;
    const param = Array.isArray((base as Record<string, unknown>)[last]) ? `${field}[0]` : field;
    return { name: `POST ${route} with NUL in ${field}`, method: 'POST', route, body, status: 400, param };
  });
const numberBody = (route: string, base: Record<string, unknown>, fields: string[]): Case[] =>
  fields.flatMap((field) =>
    BAD_JSON_NUMBERS.map((n) => ({
      name: `POST ${route} with ${field}: ${n}`,
      method: 'POST',
      route,
      body: JSON.stringify(base).replace(/}$/, `,"${field}":${n}}`),
    })),
  );

const context = { name: 'parity', content: 'x', description: 'd' };
const chat = { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] };
const image = { prompt: 'a kiln', mode: 'async' };
const video = { prompt: 'a kiln' };
const transition = { start_image: 'https://example.com/a.png', prompt: 'a kiln' };
const sleepJob = { ms: 1, mode: 'async' };

const cases: Case[] = [
  // The context store: body text, list filters and paging, references in the path.
  ...nulBody('/api/v1/contexts', context, ['name', 'content', 'description']),
  {
    name: 'POST /api/v1/contexts with NUL in a field name',
    method: 'POST',
    route: '/api/v1/contexts',
    body: { ...context, [NUL]: 1 },
    status: 400,
  },
  {
    // PostgreSQL would store U+FFFD, SQLite bytes that are not UTF-8: refused on both.
    name: 'POST /api/v1/contexts with lone surrogates',
    method: 'POST',
    route: '/api/v1/contexts',
    body: '{"name":"surrogate","content":"\\ud800","description":"\\udfff"}',
    status: 400,
    param: 'content',
  },
  {
    name: 'POST /api/v1/contexts with a surrogate pair',
    method: 'POST',
    route: '/api/v1/contexts',
    body: '{"name":"emoji","content":"\\ud83d\\ude00"}',
    status: 201,
  },
  {
    name: 'GET /api/v1/contexts?prefix= with a lone surrogate',
    method: 'GET',
    route: '/api/v1/contexts?prefix=%ED%A0%80',
  },
  ...numberBody('/api/v1/contexts', { name: 'n', content: 'x' }, ['description']),
  ...nulQuery('/api/v1/contexts', ['prefix', 'after', 'limit']),
  ...numberQuery('/api/v1/contexts', ['limit']),
  ...nulPath('GET', (ref) => `/api/v1/contexts/${ref}`),
  { name: 'GET /api/v1/contexts/{context}', method: 'GET', route: '/api/v1/contexts/{context}', status: 200 },
  {
    name: 'GET /api/v1/contexts/{context} with a NUL in a query parameter it ignores',
    method: 'GET',
    route: '/api/v1/contexts/{context}?x=a%00b',
    status: 400,
    param: 'x',
  },
  ...nulPath('DELETE', (ref) => `/api/v1/contexts/${ref}`),
  // Jobs: the list's filters and cursor, ids in the path, cancel; the usage ledger's times.
  ...nulQuery('/v1/jobs', ['status', 'kind', 'after', 'limit']),
  ...nulQuery('/api/v1/jobs', ['status', 'kind', 'after']),
  ...numberQuery('/v1/jobs', ['limit']),
  ...numberQuery('/api/v1/jobs', ['limit'], 'kind=test.sleep&'),
  ...nulPath('GET', (ref) => `/v1/jobs/${ref}`),
  ...nulPath('POST', (ref) => `/v1/jobs/${ref}/cancel`),
  ...nulQuery('/api/v1/usage', ['since', 'until']),
  ...numberQuery('/api/v1/usage', ['since', 'until']),
  ...numberQuery('/api/v1/usage', ['until'], 'since=0&'),
  ...['253402300800', '9007199254740993', '1e20', '18446744073709551616'].flatMap((n) => [
    { name: `GET /api/v1/usage?since=${n}`, method: 'GET', route: `/api/v1/usage?since=${n}`, status: 400 },
    { name: `GET /api/v1/usage?until=${n}`, method: 'GET', route: `/api/v1/usage?until=${n}`, status: 400 },
  ]),
  {
    name: 'GET /api/v1/usage with since after until',
    method: 'GET',
    route: '/api/v1/usage?since=50&until=49',
    status: 400,
  },
  {
    name: 'GET /api/v1/usage at the bound',
    method: 'GET',
    route: '/api/v1/usage?until=253402300799',
    status: 200,
  },
  // Files: ids in the path, a signed URL's parameters.
  ...nulPath('GET', (ref) => `/v1/files/${ref}`),
  ...nulPath('GET', (ref) => `/v1/files/${ref}/content`),
  ...nulQuery('/v1/files/{file}/content', ['expires', 'signature']),
  ...BAD_NUMBERS.map((n) => ({
    name: `GET /v1/files/{file}/content?expires=${n}`,
    method: 'GET',
    route: `/v1/files/{file}/content?expires=${q(n)}&signature=${'0'.repeat(64)}`,
  })),
  // Models.
  ...nulPath('GET', (ref) => `/v1/models/${ref}`),
  ...nulPath('PATCH', (ref) => `/admin/v1/keys/${ref}`),
  ...nulPath('DELETE', (ref) => `/admin/v1/keys/${ref}`),
  // Submissions: text stored with the job (webhook secrets, failure texts) and numbers.
  ...nulBody('/v1/chat/completions', { ...chat, contexts: ['c'], user: 'u' }, ['model', 'user', 'contexts']),
  {
    name: 'POST /v1/chat/completions with NUL in a message',
    method: 'POST',
    route: '/v1/chat/completions',
    body: { ...chat, messages: [{ role: 'user', content: NUL }] },
    status: 400,
    param: 'messages[0].content',
  },
  ...numberBody('/v1/chat/completions', chat, ['max_tokens', 'seed', 'n', 'temperature']),
  ...nulBody('/v1/images/generations', image, ['prompt', 'negative_prompt', 'model', 'size']),
  ...numberBody('/v1/images/generations', { prompt: 'x', mode: 'async', model: 'none' }, ['seed', 'n']),
  ...nulBody('/v1/videos/generations', video, ['prompt', 'model']),
  ...numberBody('/v1/videos/generations', { prompt: 'x', model: 'none' }, ['seed', 'duration_seconds']),
  ...nulBody('/v1/videos/transitions', transition, ['prompt', 'start_image']),
  ...numberBody('/v1/videos/transitions', { start_image: 'x' }, ['seed', 'duration_seconds']),
  ...nulBody('/v1/test/sleep', { ...sleepJob, fail: 'f', code: 'c' }, ['fail', 'code']),
  ...nulBody('/v1/test/sleep', { ...sleepJob, webhook: { url: 'https://example.com/hook', secret: 's' } }, [
    'webhook.url',
    'webhook.secret',
  ]),
  ...numberBody('/v1/test/sleep', { mode: 'async' }, ['ms']),
  // Bodiless POSTs: an empty JSON body is no body.
  {
    name: 'POST /v1/jobs/{job}/cancel with an empty JSON body',
    method: 'POST',
    route: '/v1/jobs/{job}/cancel',
    body: '',
    status: 409,
  },
  {
    name: 'POST /admin/reload with an empty JSON body',
    method: 'POST',
    route: '/admin/reload',
    body: '',
    status: 200,
  },
];

interface Side {
  kiln: TestServer;
  ids: Record<'file' | 'job' | 'context', string>;
  mcp: Client;
}

const skip = storeCases.find((c) => c.skip);

describe.skipIf(skip !== undefined)(
  `SQLite and PostgreSQL answer bad input alike${skip ? ` (skipped: ${caseTitle(skip)})` : ''}`,
  () => {
    const sides: Side[] = [];

    beforeAll(async () => {
      for (const storeCase of storeCases) {
        const kind = sleepKind();
        const kiln = await startTestServer(storeCase, {}, { kinds: [kind], routes: sleepRoutes(kind) });
        const org = (await kiln.server.store.orgs.byName('default'))?.id as string;
        const saved = await kiln.call('POST', '/api/v1/contexts', { body: context });
        const job = await kiln.call('POST', '/v1/test/sleep', { body: sleepJob });
        const file = await kiln.server.runtime.files.save({
          orgId: org,
          jobId: null,
          data: Buffer.from('parity'),
          contentType: 'text/plain',
        });
        // The job runs to the end, so cancelling it is the same 409 on both stores.
        for (let i = 0; i < 100; i++) {
          const poll = await kiln.call('GET', `/v1/jobs/${job.body.id}`);
          if (poll.body.status === 'completed') break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const mcp = new Client({ name: 'kiln-parity', version: '0.0.0' });
        await mcp.connect(
          new StreamableHTTPClientTransport(new URL(`${kiln.url}/mcp`), {
            requestInit: { headers: { Authorization: `Bearer ${kiln.adminKey}` } },
          }),
        );
        sides.push({ kiln, mcp, ids: { file: file.id, job: job.body.id, context: saved.body.id } });
      }
    }, 60_000);

    afterAll(async () => {
      for (const side of sides) {
        await side.mcp.close();
        await side.kiln.close();
      }
    });

    it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
      const answers = [];
      for (const side of sides) {
        const route = c.route.replace(
          /\{(file|job|context)\}/g,
          (_m, key: keyof Side['ids']) => side.ids[key],
        );
        // The helper sends any body, an empty one included, as `Content-Type: application/json`.
        const answer = await side.kiln.call(c.method, route, c.body === undefined ? {} : { body: c.body });
        answers.push({ store: side.kiln.server.store.dialect, status: answer.status, body: answer.body });
      }
      const [sqlite, postgres] = answers as [(typeof answers)[0], (typeof answers)[0]];
      const summary = JSON.stringify(answers);
      expect(postgres.status, summary).toBe(sqlite.status);
      for (const answer of answers) {
        expect(answer.status, summary).toBeLessThan(500);
        if (answer.status >= 400) {
          expect(answer.body.error, summary).toHaveProperty('param');
          expect(postgres.body.error.code, summary).toBe(sqlite.body.error.code);
        }
      }
      if (c.status !== undefined) expect(sqlite.status, summary).toBe(c.status);
      if (c.param !== undefined) expect(sqlite.body.error.param, summary).toBe(c.param);
      if (sqlite.status === 400 && c.param !== undefined && c.route.includes('%00')) {
        expect(sqlite.body.error.details[0]).toMatchObject({ field: c.param, rule: 'nul' });
      }
    });

    it('stored nothing from a refused request, on either store', async () => {
      for (const side of sides) {
        const list = await side.kiln.call('GET', '/api/v1/contexts?limit=100');
        const names = list.body.data.map((c: { name: string }) => c.name).sort();
        // `n` got a description "NaN" (a string, so valid); `emoji` is well-formed text.
        expect(names).toEqual(['emoji', 'n', 'parity']);
        const emoji = await side.kiln.call('GET', '/api/v1/contexts/emoji');
        expect(emoji.body).toMatchObject({ content: '\u{1F600}', size_bytes: 4 });
      }
    });

    /** What one MCP request answers: the tool result, or the JSON-RPC error's code. */
    async function mcpAnswer(side: Side, call: (client: Client) => Promise<unknown>): Promise<unknown> {
      try {
        const result = (await call(side.mcp)) as { isError?: boolean; content?: Array<{ text: string }> };
        if (result.isError) {
          const { error } = JSON.parse(result.content?.[0]?.text ?? '{}');
          return { isError: true, code: error.code, param: error.param, rule: error.details?.[0]?.rule };
        }
        return { ok: true };
      } catch (error) {
        if (error instanceof McpError) return { rpcError: error.code };
        throw error;
      }
    }

    const mcpCases: Array<[string, (client: Client) => Promise<unknown>, unknown]> = [
      [
        'save_context with NUL content',
        (c) => c.callTool({ name: 'save_context', arguments: { name: 'm', content: NUL } }),
        { isError: true, code: 'validation-failed', param: 'content', rule: 'nul' },
      ],
      [
        'save_context with a NUL description',
        (c) => c.callTool({ name: 'save_context', arguments: { name: 'm', content: 'x', description: NUL } }),
        { isError: true, code: 'validation-failed', param: 'description', rule: 'nul' },
      ],
      [
        'list_contexts with a NUL prefix',
        (c) => c.callTool({ name: 'list_contexts', arguments: { prefix: NUL } }),
        { isError: true, code: 'validation-failed', param: 'prefix', rule: 'nul' },
      ],
      [
        'list_contexts with a NUL cursor',
        (c) => c.callTool({ name: 'list_contexts', arguments: { after: NUL } }),
        { isError: true, code: 'validation-failed', param: 'after', rule: 'nul' },
      ],
      [
        'list_contexts with limit 1e309',
        (c) => c.callTool({ name: 'list_contexts', arguments: { limit: Number.POSITIVE_INFINITY } }),
        { isError: true, code: 'validation-failed', param: 'limit', rule: 'type' },
      ],
      [
        'get_context by a NUL name',
        (c) => c.callTool({ name: 'get_context', arguments: { id_or_name: NUL } }),
        { isError: true, code: 'validation-failed', param: 'id_or_name', rule: 'pattern' },
      ],
      [
        'resources/read of a NUL name',
        (c) => c.readResource({ uri: 'kiln-context://a%00b' }),
        { rpcError: -32002 },
      ],
      ['resources/list from a NUL cursor', (c) => c.listResources({ cursor: NUL }), { rpcError: -32602 }],
    ];

    it.each(mcpCases)('MCP: %s', async (_name, call, expected) => {
      const answers = [];
      for (const side of sides) answers.push(await mcpAnswer(side, call));
      expect(answers[1]).toEqual(answers[0]);
      expect(answers[0]).toEqual(expected);
    });
  },
);
