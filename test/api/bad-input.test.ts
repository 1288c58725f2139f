import { connect } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/** Every answer to bad input is a 4xx with the envelope; a 400 always says what was wrong. */
function expectEnvelope(answer: { status: number; body: any }, status: number, code?: string) {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  expect(answer.body).toEqual({
    error: expect.objectContaining({
      type: expect.any(String),
      code: expect.any(String),
      message: expect.any(String),
    }),
  });
  expect(answer.body.error.message.length).toBeGreaterThan(0);
  // OpenAI's error schema requires `param`: a field, or null when none is at fault.
  expect(answer.body.error).toHaveProperty('param');
  expect(answer.body.error.param === null || typeof answer.body.error.param === 'string').toBe(true);
  expect(JSON.stringify(answer.body)).not.toMatch(/\n\s+at |node_modules|\.ts:\d+/);
  if (code) expect(answer.body.error.code).toBe(code);
  if (status === 400) {
    expect(answer.body.error.details.length).toBeGreaterThan(0);
    for (const detail of answer.body.error.details) {
      expect(detail).toEqual(
        expect.objectContaining({
          field: expect.any(String),
          rule: expect.any(String),
          message: expect.any(String),
        }),
      );
    }
  }
}

describe('bad input never yields a 500', () => {
  let kiln: TestServer;
  const post = (body: unknown, headers?: Record<string, string>) =>
    kiln.call('POST', '/api/v1/contexts', { body, ...(headers ? { headers } : {}) });

  beforeAll(async () => {
    const kind = sleepKind();
    kiln = await startTestServer(
      storeCases[0] as (typeof storeCases)[0],
      {},
      {
        kinds: [kind],
        routes: sleepRoutes(kind),
      },
    );
    await post({ name: 'precious', content: 'do not lose me' });
  });
  afterAll(async () => kiln?.close());

  it('malformed JSON is 400 invalid-json', async () => {
    for (const body of ['{"name":', '{name: "x"}', '[1,2', 'nul', '{"a":1}}']) {
      expectEnvelope(await post(body), 400, 'invalid-json');
    }
  });

  it('an empty JSON body, a JSON scalar or array is 400 with details', async () => {
    expectEnvelope(await post(''), 400, 'invalid-json');
    for (const body of ['null', '42', '"text"', '[]', 'true']) {
      expectEnvelope(await post(body), 400, 'validation-failed');
    }
  });

  it('wrong types name the field, the rule and what was received', async () => {
    const answer = await post({ name: 42, content: ['a'] });
    expectEnvelope(answer, 400, 'validation-failed');
    expect(answer.body.error.details).toEqual(
      expect.arrayContaining([
        { field: 'name', rule: 'type', message: 'name must be a string', received: 42 },
        { field: 'content', rule: 'type', message: 'content must be a string', received: 'array' },
      ]),
    );
  });

  it('missing fields, oversized and malformed names are each reported', async () => {
    const missing = await post({});
    expectEnvelope(missing, 400, 'validation-failed');
    expect(missing.body.error.details.map((d: { field: string }) => d.field).sort()).toEqual([
      'content',
      'name',
    ]);

    const long = await post({ name: 'n'.repeat(129), content: 'x' });
    expectEnvelope(long, 400, 'validation-failed');
    expect(long.body.error.details[0]).toMatchObject({
      field: 'name',
      rule: 'max_length',
      limit: 128,
      received: 129,
    });

    // `.` and `..` as a part of the path: fetch and curl fold them away, so such a name could not be
    // read back, and `team/../prod` would reach `prod`.
    for (const name of [
      'ctx_reserved',
      'has space',
      'semi;colon',
      'ünïcode',
      '',
      '.',
      '..',
      'a/./b',
      'team/../prod',
      'a/..',
    ]) {
      const answer = await post({ name, content: 'x' });
      expectEnvelope(answer, 400, 'validation-failed');
      expect(answer.body.error.param).toBe('name');
    }
    // Dots elsewhere are names like any other.
    for (const name of ['...', '.hidden', 'a.b/..c', 'v1.2/spec'])
      expect((await post({ name, content: 'x' })).status).toBe(201);
  });

  it('unknown fields are refused with a hint for look-alikes', async () => {
    const answer = await post({ name: 'ok', content: 'x', Description: 'd', colour: 'red' });
    expectEnvelope(answer, 400, 'validation-failed');
    expect(answer.body.error.details).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          field: 'Description',
          rule: 'unknown-field',
          message: "unknown field 'Description' (did you mean description?)",
        }),
        expect.objectContaining({
          field: 'colour',
          rule: 'unknown-field',
          allowed: ['name', 'content', 'description'],
        }),
      ]),
    );
  });

  it('bad query parameters are 400 with details', async () => {
    for (const query of ['limit=0', 'limit=101', 'limit=abc', 'sort=name', `prefix=${'p'.repeat(200)}`]) {
      expectEnvelope(await kiln.call('GET', `/api/v1/contexts?${query}`), 400, 'validation-failed');
    }
  });

  it('a number in a query string is digits: 1e1, 0x10 and 5.0 are no limit, 10 is', async () => {
    for (const limit of ['1e1', '0x10', '%205', '5.0', 'Infinity', '']) {
      const answer = await kiln.call('GET', `/api/v1/contexts?limit=${limit}`);
      expectEnvelope(answer, 400, 'validation-failed');
      expect(answer.body.error.details).toEqual([
        expect.objectContaining({ field: 'limit', rule: 'type', message: 'limit must be an integer' }),
      ]);
    }
    // Listed with the query's other problems, as a body's are, and each field once.
    const both = await kiln.call('GET', '/api/v1/contexts?limit=abc&sort=name');
    expectEnvelope(both, 400, 'validation-failed');
    expect(both.body.error.details).toEqual([
      expect.objectContaining({ field: 'sort', rule: 'unknown-field' }),
      expect.objectContaining({ field: 'limit', rule: 'type', received: 'abc' }),
    ]);
    expect(both.body.error.message).toBe("unknown field 'sort' (and 1 more problem(s), see details)");
    for (const query of ['limit=10', 'limit=010']) {
      expect((await kiln.call('GET', `/api/v1/contexts?${query}`)).status).toBe(200);
    }
    // Every endpoint's numbers alike: the job list and the usage report.
    expect((await kiln.call('GET', '/v1/jobs?limit=1e1')).body.error.details[0]).toMatchObject({
      field: 'limit',
    });
    const usage = await kiln.call('GET', '/api/v1/usage?since=0x10');
    expect(usage.body.error.details[0]).toMatchObject({ field: 'since', rule: 'type' });
    expect((await kiln.call('GET', '/api/v1/usage?since=16')).status).toBe(200);
  });

  it('a body that is not JSON is 415; one over the server limit is 413', async () => {
    expectEnvelope(
      await post('name=x', { 'content-type': 'application/x-www-form-urlencoded' }),
      415,
      'unsupported-media-type',
    );
    expectEnvelope(await post('hello', { 'content-type': 'text/plain' }), 415, 'unsupported-media-type');
    const huge = JSON.stringify({ name: 'huge', content: 'x'.repeat(3 * 1024 * 1024) });
    expectEnvelope(await post(huge), 413, 'request-too-large');
  });

  it('a POST that takes no body accepts Content-Type: application/json with an empty body', async () => {
    const submitted = await kiln.call('POST', '/v1/test/sleep', { body: { ms: 60_000 } });
    expect(submitted.status).toBe(202);
    // Exactly what many clients send: the JSON content type, Content-Length: 0.
    const cancelled = await kiln.call('POST', `/v1/jobs/${submitted.body.id}/cancel`, { body: '' });
    expect(cancelled.status, JSON.stringify(cancelled.body)).toBe(200);
    expect(cancelled.body).toMatchObject({ id: submitted.body.id, status: 'cancelled' });
    expect((await kiln.call('POST', '/admin/reload', { body: '' })).status).toBe(200);
    // No body at all, and an empty object, as before: the job is cancelled already.
    for (const again of [
      await kiln.call('POST', `/v1/jobs/${submitted.body.id}/cancel`),
      await kiln.call('POST', `/v1/jobs/${submitted.body.id}/cancel`, { body: {} }),
    ]) {
      expect(again.status).toBe(409);
      expect(again.body).toMatchObject({
        error: { code: 'job-already-terminal', param: null },
        job: { status: 'cancelled' },
      });
    }
  });

  it('a body that is there but not JSON is still 400 invalid-json, bodiless route or not', async () => {
    for (const body of ['{', 'null,', ' ', 'cancel']) {
      const answer = await kiln.call('POST', '/v1/jobs/0190b1a2-0000-7000-8000-000000000000/cancel', {
        body,
      });
      expectEnvelope(answer, 400, 'invalid-json');
      expect(answer.body.error.param).toBe('body');
    }
    // A route that needs a body still says an empty one is not JSON.
    expectEnvelope(await post(''), 400, 'invalid-json');
  });

  it('a route that takes no body refuses one with fields, naming them, rather than ignore them', async () => {
    const reload = await kiln.call('POST', '/admin/reload', { body: { x: 1 } });
    expectEnvelope(reload, 400, 'validation-failed');
    expect(reload.body.error).toMatchObject({
      param: 'x',
      message: "unknown field 'x': POST /admin/reload takes no body",
    });
    const submitted = await kiln.call('POST', '/v1/test/sleep', { body: { ms: 60_000 } });
    for (const body of [{ reason: 'done' }, [1], 5]) {
      const refused = await kiln.call('POST', `/v1/jobs/${submitted.body.id}/cancel`, { body });
      expectEnvelope(refused, 400, 'validation-failed');
    }
    // Refused before anything was done: the job still runs.
    expect((await kiln.call('GET', `/v1/jobs/${submitted.body.id}`)).body.status).not.toBe('cancelled');
    expect((await kiln.call('POST', `/v1/jobs/${submitted.body.id}/cancel`)).status).toBe(200);
  });

  it('every error the framework raises itself carries the envelope and param', async () => {
    const cases: Array<[string, Promise<{ status: number; body: any }>, number, string, string | null]> = [
      ['invalid JSON', post('{"name":'), 400, 'invalid-json', 'body'],
      ['empty JSON body', post(''), 400, 'invalid-json', 'body'],
      ['validation', post({ name: 'x' }), 400, 'validation-failed', 'content'],
      [
        'form body',
        post('a=b', { 'content-type': 'application/x-www-form-urlencoded' }),
        415,
        'unsupported-media-type',
        null,
      ],
      [
        'body over the limit',
        post(JSON.stringify({ name: 'h', content: 'x'.repeat(3 * 1024 * 1024) })),
        413,
        'request-too-large',
        null,
      ],
      ['unknown route', kiln.call('GET', '/v1/nothing-here'), 404, 'route-not-found', null],
      ['no key', kiln.call('GET', '/api/v1/contexts', { key: null }), 401, 'unauthorized', null],
      ['unknown context', kiln.call('GET', '/api/v1/contexts/nope'), 404, 'not-found', null],
      ['undecodable path', kiln.call('GET', '/v1/jobs/%E0%A4%A'), 400, 'validation-failed', 'path'],
      [
        'a NUL in a context reference, named as the API names it',
        kiln.call('GET', '/api/v1/contexts/a%00b'),
        400,
        'validation-failed',
        'id_or_name',
      ],
      [
        'path parameter over 100 characters',
        kiln.call('GET', `/v1/jobs/${'a'.repeat(101)}`),
        400,
        'validation-failed',
        'path',
      ],
    ];
    for (const [label, answering, status, code, param] of cases) {
      const answer = await answering;
      expectEnvelope(answer, status, code);
      expect(answer.body.error.param, label).toBe(param);
    }
    // A path that does not decode is not quoted back: a signed URL's signature stays out of the body.
    const signed = await kiln.call('GET', '/v1/files/%E0%A4%A/content?expires=1&signature=s3cr3t');
    expectEnvelope(signed, 400, 'validation-failed');
    expect(JSON.stringify(signed.body)).not.toContain('s3cr3t');
    expect(signed.body.error.details[0].message).toBe('the request path is not validly percent-encoded');
  });

  it('requests Node refuses before routing still get the envelope', async () => {
    const { port } = new URL(kiln.url);
    const raw = (request: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), '127.0.0.1');
        let answer = '';
        socket.on('data', (chunk) => {
          answer += chunk.toString();
        });
        socket.on('close', () => resolve(answer));
        socket.on('error', reject);
        socket.write(request);
      });
    const parse = (answer: string) => {
      const [head, body] = answer.split('\r\n\r\n') as [string, string];
      return { status: Number(head.split(' ')[1]), body: JSON.parse(body) };
    };

    expectEnvelope(parse(await raw('NOT HTTP AT ALL\r\n\r\n')), 400, 'validation-failed');
    const huge = `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`;
    expectEnvelope(parse(await raw(huge)), 413, 'request-too-large');
    // An expectation Node does not meet: its 417 has the envelope too, and nothing is stored.
    const body = '{"name":"expected","content":"x"}';
    const expecting = parse(
      await raw(
        `POST /api/v1/contexts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${kiln.adminKey}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: weird\r\n\r\n${body}`,
      ),
    );
    expectEnvelope(expecting, 417, 'expectation-failed');
    expect(expecting.body.error.param).toBe('headers.expect');
    expect((await kiln.call('GET', '/api/v1/contexts/expected')).status).toBe(404);
  });

  it('prototype poisoning is refused, as what it is rather than as JSON that is not JSON', async () => {
    for (const body of [
      '{"name":"p","content":"x","__proto__":{"admin":true}}',
      '{"name":"p","content":"x","meta":{"constructor":{"prototype":{"admin":true}}}}',
    ]) {
      const answer = await post(body);
      expectEnvelope(answer, 400, 'validation-failed');
      expect(answer.body.error.message).toContain('"__proto__"');
      expect(answer.body.error.details).toEqual([expect.objectContaining({ field: 'body', rule: 'json' })]);
    }
    // A body that is not JSON at all is still said to be so.
    expectEnvelope(await post('{"__proto__":'), 400, 'invalid-json');
    expect((await kiln.call('GET', '/api/v1/contexts/p')).status).toBe(404);
  });

  it('unknown routes and methods are 404 with the envelope, even unauthenticated', async () => {
    expectEnvelope(await kiln.call('GET', '/v1/nothing-here'), 404, 'route-not-found');
    expectEnvelope(await kiln.call('PUT', '/api/v1/contexts', { body: {} }), 404, 'route-not-found');
    expectEnvelope(await kiln.call('GET', '/v1/nothing-here', { key: null }), 404, 'route-not-found');
    expectEnvelope(await kiln.call('GET', '/mcp'), 405, 'method-not-allowed');
  });

  it('missing auth is 401 before the body is even read', async () => {
    expectEnvelope(
      await kiln.call('POST', '/api/v1/contexts', { key: null, body: '{"broken' }),
      401,
      'unauthorized',
    );
  });

  it('property: any JSON body to POST /api/v1/contexts is answered 2xx, 400 or 413, never 5xx', async () => {
    const body = fc.oneof(
      fc.jsonValue(),
      fc.record(
        {
          name: fc.oneof(fc.string({ maxLength: 140 }), fc.jsonValue()),
          content: fc.oneof(fc.string(), fc.jsonValue()),
          description: fc.jsonValue(),
        },
        { requiredKeys: [] },
      ),
      fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue()),
    );
    await fc.assert(
      fc.asyncProperty(body, async (value) => {
        const answer = await post(JSON.stringify(value));
        if (answer.status >= 200 && answer.status < 300) {
          const saved = value as { name: string; content: string };
          const fetched = await kiln.call('GET', `/api/v1/contexts/${encodeURIComponent(saved.name)}`);
          expect(fetched.body.content).toBe(saved.content);
          return;
        }
        expect([400, 413]).toContain(answer.status);
        expectEnvelope(answer, answer.status);
      }),
      { numRuns: 150 },
    );
  });

  it('property: any reference in the path is 200, 400 or 404, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 300 }), async (ref) => {
        const answer = await kiln.call('GET', `/api/v1/contexts/${encodeURIComponent(ref)}`);
        expect([200, 400, 404]).toContain(answer.status);
        if (answer.status !== 200) expectEnvelope(answer, answer.status);
      }),
      { numRuns: 150 },
    );
  });

  it('after all of it, stored data is intact', async () => {
    const answer = await kiln.call('GET', '/api/v1/contexts/precious');
    expect(answer.body).toMatchObject({ content: 'do not lose me', version: 1 });
  });
});
