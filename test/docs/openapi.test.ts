import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import type { FastifyInstance } from 'fastify';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { VERSION } from '../../src/version.js';
import { closeAll, simPool } from '../chat/fleet.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

type Answer = { status: number; body: any; headers: Headers };
type OpenApi = { paths: Record<string, Record<string, OpenApiOperation>> };
type OpenApiResponse = {
  description: string;
  content?: Record<string, { schema?: unknown }>;
  headers?: Record<string, unknown>;
};
type OpenApiOperation = {
  operationId?: string;
  parameters?: Array<{ name: string; in: string }>;
  requestBody?: unknown;
  responses?: Record<string, OpenApiResponse>;
};

/** Request headers of the API's own (not HTTP's plumbing): a caller must learn them from the document. */
const API_REQUEST_HEADERS = ['idempotency-key', 'prefer', 'range', 'if-none-match', 'if-match'];
/** Answer headers of the API's own: where they come, the document must say so. */
const API_ANSWER_HEADERS = /^(location|retry-after|retry-after-ms|etag|x-ratelimit-.*)$/;

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'patch', 'trace'];
const DOCUMENT_ID = 'https://kiln.invalid/openapi.json';
const TERMINAL = ['completed', 'failed', 'cancelled', 'timeout'];

/** `GET /v1/jobs/{id}`, `GET /v1/jobs/:id` alike, and `/api/v1/contexts/*`: every parameter as `{}`. */
const normalise = (route: string) => route.replace(/\{[^}]+\}|:[A-Za-z0-9_]+|\*/g, '{}');

/** `METHOD /path` of every operation in the document, HEAD aside (Fastify adds one to each GET). */
function documentedOperations(doc: OpenApi): string[] {
  return Object.entries(doc.paths).flatMap(([route, item]) =>
    Object.keys(item)
      .filter((method) => HTTP_METHODS.includes(method))
      .map((method) => `${method.toUpperCase()} ${route}`),
  );
}

/** A JSON pointer into the document, as a URI fragment Ajv resolves. */
const pointer = (...tokens: string[]) =>
  `${DOCUMENT_ID}#/${tokens.map((t) => encodeURIComponent(t.replaceAll('~', '~0').replaceAll('/', '~1'))).join('/')}`;

/**
 * Every route the server answers, as `METHOD /path`, read from Fastify's route tree: its only full
 * listing. find-my-way prints a wildcard without the static text before it (`/x/*` as `*` under
 * `/x`), so each route read is checked with `hasRoute` by whoever uses it.
 */
function routeTable(app: FastifyInstance): Array<{ method: string; url: string }> {
  const routes: Array<{ method: string; url: string }> = [];
  const paths: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    if (line.trim() === '') continue;
    const match = /^((?:│ {3}| {4})*)[├└]── (\S+)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (!match) throw new Error(`a line of the route tree not understood: ${line}`);
    const depth = (match[1] as string).length / 4;
    const parent = depth === 0 ? '' : (paths[depth - 1] as string);
    const segment = match[2] as string;
    const url = segment === '*' && !parent.endsWith('/') ? `${parent}/*` : `${parent}${segment}`;
    paths[depth] = url;
    for (const method of match[3]?.split(', ') ?? []) routes.push({ method, url });
  }
  return routes;
}

async function pngDataUri(): Promise<string> {
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#336' } })
    .png()
    .toBuffer();
  return `data:image/png;base64,${png.toString('base64')}`;
}

/**
 * The issue's promise: /openapi.json passes a real OpenAPI 3.1 validator, it documents every
 * public route, and every operation in it is called here against a simulated fleet, each answer
 * checked against the schema the document gives for its status (or `default`).
 */
describe('the OpenAPI document, against the live server', () => {
  let kiln: TestServer;
  let sims: LlmSim[] = [];
  let comfy: ComfySim;
  let configDir: string;
  let doc: OpenApi;
  let member: string;
  let png: string;
  /** A webhook receiver on loopback, so that a job's details carry a delivery. */
  const receiver = createServer((request, response) => {
    request.resume().on('end', () => response.writeHead(204).end());
  });
  let hookUrl: string;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const validators = new Map<string, ValidateFunction>();
  /** `METHOD /path` as the document spells them, once a test has checked an answer of it. */
  const exercised = new Set<string>();

  beforeAll(async () => {
    const [quick, slow] = [...(await simPool(1)), ...(await simPool(1, { decodeMsPerToken: 50 }))] as [
      LlmSim,
      LlmSim,
    ];
    sims = [quick, slow];
    comfy = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 1, steps: 2 });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks/kiln?token=s3cret`;
    // A file, so that POST /admin/reload re-reads the same fleet (YAML reads JSON).
    configDir = mkdtempSync(path.join(tmpdir(), 'kiln-openapi-'));
    const configFile = path.join(configDir, 'kiln.yaml');
    writeFileSync(
      configFile,
      JSON.stringify({
        engines: {
          quick: { serves: 'unique', replicas: [quick.url], models: { m: 'sim-model' } },
          slow: { serves: 'unique', replicas: [slow.url], models: { slow: 'sim-model' } },
        },
        runners: { gpu: { url: comfy.url, models: ['ltx-video', 'sdxl'] } },
        // Ends its answer at its first sentence, as a model that is done: a response `completed`.
        personas: { brief: { model: 'm', defaults: { stop: ['.'] } } },
      }),
    );
    kiln = await startTestServer(
      storeCases[0] as (typeof storeCases)[0],
      { 'jobs.poll_interval_ms': 50, 'security.allow_hosts': ['127.0.0.1'] },
      { configFile },
    );
    member = await kiln.key('default');
    png = await pngDataUri();
    doc = (await kiln.call('GET', '/openapi.json', { key: null })).body;
    ajv.addSchema(doc as object, DOCUMENT_ID);
  }, 30_000);
  afterAll(async () => {
    await kiln?.close();
    await comfy?.close();
    await closeAll(sims);
    await new Promise((resolve) => receiver.close(resolve));
    if (configDir) rmSync(configDir, { recursive: true, force: true });
  });

  function describedOperation(operation: string): OpenApiOperation {
    const [method, route] = operation.split(' ') as [string, string];
    const described = doc.paths[route]?.[method.toLowerCase()];
    expect(described, `${operation} is in the document`).toBeDefined();
    return described as OpenApiOperation;
  }

  /** The response the document gives `operation` for `status`: its own, else `default`. */
  function documentedResponse(operation: string, status: number): OpenApiResponse & { key: string } {
    const responses = describedOperation(operation).responses ?? {};
    const key = String(status) in responses ? String(status) : 'default';
    const response = responses[key];
    expect(response, `${operation} documents ${status} or a default`).toBeDefined();
    return { ...(response as OpenApiResponse), key };
  }

  /**
   * Checks a live answer of `operation` (`METHOD /path` as the document has it) against the
   * document: a JSON body against its schema, any other body by its content type.
   */
  function expectDocumented(
    operation: string,
    answer: Answer,
    request: { url: string; headers?: Record<string, string>; body?: unknown } = { url: '' },
  ): void {
    exercised.add(operation);
    // What the caller sent that only the document can tell a generated client about.
    const parameters = describedOperation(operation).parameters ?? [];
    const documentedIn = (where: string) =>
      parameters.filter((p) => p.in === where).map((p) => p.name.toLowerCase());
    const query = [...new URL(request.url, 'http://kiln.invalid').searchParams.keys()];
    expect(documentedIn('query'), `${operation}: its query parameters`).toEqual(
      expect.arrayContaining(query),
    );
    const sentHeaders = Object.keys(request.headers ?? {})
      .map((name) => name.toLowerCase())
      .filter((name) => API_REQUEST_HEADERS.includes(name));
    expect(documentedIn('header'), `${operation}: its request headers`).toEqual(
      expect.arrayContaining(sentHeaders),
    );
    if (request.body !== undefined) {
      expect(describedOperation(operation).requestBody, `${operation} has a request body`).toBeDefined();
    }
    const response = documentedResponse(operation, answer.status);
    const what = `${operation} ${answer.status} (${response.key})`;
    const answerHeaders = [...answer.headers.keys()].filter((name) => API_ANSWER_HEADERS.test(name));
    expect(Object.keys(response.headers ?? {}), `${what}: its headers`).toEqual(
      expect.arrayContaining(answerHeaders),
    );
    const contentType = (answer.headers.get('content-type') ?? '').split(';')[0]?.trim() ?? '';
    if (!response.content) {
      expect(answer.body, `${what} has no body`).toBe('');
      return;
    }
    const mediaTypes = Object.keys(response.content);
    const [major] = contentType.split('/');
    const mediaType =
      mediaTypes.find((t) => t === contentType) ??
      mediaTypes.find((t) => t === `${major}/*`) ??
      mediaTypes.find((t) => t === '*/*');
    expect(mediaType, `${what}: ${contentType} is one of ${mediaTypes.join(', ')}`).toBeDefined();
    if (contentType !== 'application/json') return;
    const [method, route] = operation.split(' ') as [string, string];
    const schemaRef = pointer(
      'paths',
      route,
      method.toLowerCase(),
      'responses',
      response.key,
      'content',
      mediaType as string,
      'schema',
    );
    let validate = validators.get(schemaRef);
    if (!validate) {
      validate = ajv.compile({ $ref: schemaRef });
      validators.set(schemaRef, validate);
    }
    const valid = validate(answer.body);
    expect(
      valid,
      `${what}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(answer.body, null, 2).slice(0, 2000)}`,
    ).toBe(true);
  }

  /** `call`, with its answer checked against the document. */
  async function documented(
    operation: string,
    url: string,
    options: Parameters<TestServer['call']>[2] = {},
  ): Promise<Answer> {
    const answer = await kiln.call(operation.split(' ')[0] as string, url, options);
    expectDocumented(operation, answer, { url, headers: options.headers, body: options.body });
    return answer;
  }

  /** Polls the job until it ends, each poll checked against the document. */
  async function settled(jobId: string): Promise<Answer> {
    return waitUntil(
      async () => {
        const answer = await documented('GET /v1/jobs/{id}', `/v1/jobs/${jobId}`);
        return TERMINAL.includes(answer.body.status) ? answer : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 20, describe: () => `job ${jobId} to end` },
    );
  }

  it('passes an OpenAPI 3.1 validator', async () => {
    const validator = new Validator();
    const result = await validator.validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
    expect(doc).toMatchObject({ openapi: '3.1.0', info: { title: 'Kiln', version: VERSION } });
  });

  it('names every operation once, so that a client generated from it compiles', () => {
    const ids = Object.values(doc.paths).flatMap((item) =>
      Object.entries(item)
        .filter(([method]) => HTTP_METHODS.includes(method))
        .map(([, operation]) => operation.operationId),
    );
    expect(ids.length).toBeGreaterThan(40);
    expect(ids.filter((id) => id === undefined)).toEqual([]);
    expect(ids.filter((id, index) => ids.indexOf(id) !== index)).toEqual([]);
    expect(doc.paths['/api/v1/contexts/{id_or_name}']?.get?.operationId).toBe(
      'get_api_v1_contexts_id_or_name',
    );
  });

  it('documents every public route the server has, and none it does not', () => {
    const app = kiln.server.app;
    // Pages, not API: the reference page's own assets (its scripts, /docs/json, /docs/yaml), and the
    // console's page and assets, hidden on purpose (src/console/serve.ts) and there only when built.
    const table = routeTable(app).filter(
      ({ method, url }) => method !== 'HEAD' && !/^\/docs\/|^\/console(\/|$)/.test(url),
    );
    for (const { method, url } of table) {
      expect(app.hasRoute({ method: method as 'GET', url }), `${method} ${url} read right`).toBe(true);
    }
    const served = new Set(table.map(({ method, url }) => `${method} ${normalise(url)}`));
    const inDocument = new Set(documentedOperations(doc).map(normalise));
    expect([...inDocument].filter((op) => !served.has(op)).sort()).toEqual([]);
    expect([...served].filter((op) => !inDocument.has(op)).sort()).toEqual([]);
    expect(served.size).toBeGreaterThan(40);
  });

  it('GET / answers HTML naming the version and the /v1 base URL, and JSON facts for Accept: application/json; /docs needs no key', async () => {
    const html = await documented('GET /', '/', { key: null, headers: { accept: 'text/html' } });
    expect(html.status).toBe(200);
    expect(html.headers.get('content-type')).toMatch(/^text\/html/);
    expect(html.body).toContain(VERSION);
    expect(html.body).toContain(`${kiln.url}/v1`);

    const json = await documented('GET /', '/', { key: null, headers: { accept: 'application/json' } });
    expect(json.status).toBe(200);
    expect(json.body).toMatchObject({
      object: 'gateway',
      version: VERSION,
      openai_base_url: `${kiln.url}/v1`,
      links: { openapi: `${kiln.url}/openapi.json`, api_reference: `${kiln.url}/docs` },
    });

    const reference = await kiln.call('GET', '/docs', { key: null });
    expectDocumented('GET /docs', reference);
    expect(reference.status).toBe(200);
    expect(reference.headers.get('content-type')).toMatch(/^text\/html/);
    expect(reference.body).toMatch(/<html/i);

    const document = await documented('GET /openapi.json', '/openapi.json', { key: null });
    expect(document.status).toBe(200);
  });

  it('operations: probes, metrics and reload, with 401 and 403 in the envelope', async () => {
    expect((await documented('GET /healthz', '/healthz', { key: null })).status).toBe(200);
    expect((await documented('GET /readyz', '/readyz', { key: null })).body).toEqual({
      status: 'ready',
      store: 'sqlite',
    });
    const metrics = await documented('GET /metrics', '/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.body).toMatch(/kiln_/);
    expect((await documented('GET /metrics', '/metrics', { key: null })).status).toBe(401);
    expect((await documented('GET /metrics', '/metrics', { key: 'kiln_sk_nope' })).status).toBe(401);

    expect((await documented('POST /admin/reload', '/admin/reload', { key: member })).status).toBe(403);
    const reloaded = await documented('POST /admin/reload', '/admin/reload');
    expect(reloaded.status).toBe(200);
    expect(reloaded.body.models).toEqual(expect.arrayContaining(['m', 'slow']));
  });

  it('models: the list, one entry, and an unknown model', async () => {
    const list = await documented('GET /v1/models', '/v1/models');
    expect(list.body.data.map((m: { id: string }) => m.id)).toEqual(
      expect.arrayContaining(['m', 'slow', 'sdxl', 'ltx-video']),
    );
    expect((await documented('GET /v1/models/{id}', '/v1/models/m')).body.id).toBe('m');
    const unknown = await documented('GET /v1/models/{id}', '/v1/models/nowhere');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('model-not-found');
  });

  it('chat: sync, stream and async, a bad body and an unknown model', async () => {
    const route = 'POST /v1/chat/completions';
    const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 };
    const sync = await documented(route, '/v1/chat/completions', { body });
    expect(sync.status).toBe(200);
    const stream = await documented(route, '/v1/chat/completions', { body: { ...body, stream: true } });
    expect(stream.status).toBe(200);
    expect(stream.body).toContain('data: [DONE]');
    const async = await documented(route, '/v1/chat/completions', { body: { ...body, mode: 'async' } });
    expect(async.status).toBe(202);
    expect((await settled(async.body.id)).body.status).toBe('completed');

    const bad = await documented(route, '/v1/chat/completions', { body: { model: 'm' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('validation-failed');
    const notJson = await documented(route, '/v1/chat/completions', { body: '{' });
    expect(notJson.status).toBe(400);
    const unknown = await documented(route, '/v1/chat/completions', { body: { ...body, model: 'nowhere' } });
    expect(unknown.status).toBe(404);
  });

  it('a key with a per-minute limit: its rate-limit headers on answers, then 429 with when to retry', async () => {
    const created = await kiln.call('POST', '/admin/v1/keys', {
      body: { org: 'default', name: 'paced', limits: { requests_per_minute: 1 } },
    });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
    const route = 'POST /v1/chat/completions';
    const first = await documented(route, '/v1/chat/completions', { key, body });
    expect([first.status, first.headers.get('x-ratelimit-remaining-requests')]).toEqual([200, '0']);
    const refused = await documented(route, '/v1/chat/completions', { key, body });
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    const listed = await documented('GET /v1/models', '/v1/models', { key });
    expect(listed.headers.get('x-ratelimit-limit-requests')).toBe('1');
  });

  it('responses: sync, stream and background; retrieve, resume, input items, cancel, delete; 400 and 404', async () => {
    const route = 'POST /v1/responses';
    const body = { model: 'brief', input: 'hi' };
    const sync = await documented(route, '/v1/responses', { body });
    expect(sync.body.status, JSON.stringify(sync.body)).toBe('completed');
    const stream = await documented(route, '/v1/responses', { body: { ...body, stream: true } });
    expect(stream.body).toContain('event: response.completed');
    const background = await documented(route, '/v1/responses', {
      body: { ...body, background: true, stream: true },
    });
    expect(background.status).toBe(200);
    expect(background.body).toContain('event: response.completed');
    const id = /"id":"(resp_[^"]+)"/.exec(background.body)?.[1] as string;

    const retrieved = await documented('GET /v1/responses/{id}', `/v1/responses/${id}`);
    expect(retrieved.body).toMatchObject({ id, status: 'completed' });
    const resumed = await documented('GET /v1/responses/{id}', `/v1/responses/${id}?stream=true`);
    expect(resumed.status).toBe(200);
    expect(resumed.body).toContain('event: response.completed');
    const notResumable = await documented(
      'GET /v1/responses/{id}',
      `/v1/responses/${sync.body.id}?stream=true`,
    );
    expect(notResumable.status).toBe(400);
    const items = await documented('GET /v1/responses/{id}/input_items', `/v1/responses/${id}/input_items`);
    expect(items.body.data).toHaveLength(1);

    // A long answer on the slow model, cancelled while it runs.
    const running = await documented(route, '/v1/responses', {
      body: { ...body, model: 'slow', max_output_tokens: 400, background: true },
    });
    expect(running.body.status).toMatch(/queued|in_progress/);
    const cancelled = await documented(
      'POST /v1/responses/{id}/cancel',
      `/v1/responses/${running.body.id}/cancel`,
    );
    expect(cancelled.body.status).toBe('cancelled');
    const foreground = await documented(
      'POST /v1/responses/{id}/cancel',
      `/v1/responses/${sync.body.id}/cancel`,
    );
    expect(foreground.status).toBe(400);

    const deleted = await documented('DELETE /v1/responses/{id}', `/v1/responses/${id}`);
    expect(deleted.body).toEqual({ id, object: 'response', deleted: true });
    for (const [operation, url] of [
      ['GET /v1/responses/{id}', `/v1/responses/${id}`],
      ['GET /v1/responses/{id}/input_items', `/v1/responses/${id}/input_items`],
      ['DELETE /v1/responses/{id}', `/v1/responses/${id}`],
    ] as const) {
      const gone = await documented(operation, url);
      expect(gone.status, operation).toBe(404);
      expect(gone.body.error.code, operation).toBe('not-found');
    }
    const bad = await documented(route, '/v1/responses', {
      body: { model: 'm', input: 'hi', store: false, background: true },
    });
    expect(bad.status).toBe(400);
  });

  it('media, files and jobs: images, videos, a file’s record, bytes and signed URL; polls, details, lists, cancels, deletes and usage', async () => {
    const images = await documented('POST /v1/images/generations', '/v1/images/generations', {
      body: { prompt: 'a kiln', size: '512x512' },
    });
    expect(images.status, JSON.stringify(images.body)).toBe(200);
    const queued = await documented('POST /v1/images/generations', '/v1/images/generations', {
      body: { prompt: 'a kiln', size: '512x512', mode: 'async', webhook: { url: hookUrl } },
    });
    expect(queued.status).toBe(202);
    const video = await documented('POST /v1/videos/generations', '/v1/videos/generations', {
      body: { prompt: 'a kiln', duration_seconds: 1 },
    });
    expect(video.status, JSON.stringify(video.body)).toBe(202);
    const transition = await documented('POST /v1/videos/transitions', '/v1/videos/transitions', {
      body: { start_image: png, end_image: png, duration_seconds: 1 },
    });
    expect(transition.status, JSON.stringify(transition.body)).toBe(202);
    // Waited for: the job with its result, once with an idempotency key.
    const waited = await documented('POST /v1/videos/generations', '/v1/videos/generations', {
      headers: { prefer: 'wait=20', 'idempotency-key': 'openapi-waited' },
      body: { prompt: 'a kiln', duration_seconds: 1 },
    });
    expect(
      [waited.status, waited.body.status, waited.body.result?.content_type],
      JSON.stringify(waited.body),
    ).toEqual([200, 'completed', 'video/webm']);
    const waitedTransition = await documented('POST /v1/videos/transitions', '/v1/videos/transitions', {
      headers: { prefer: 'wait=20' },
      body: { start_image: png, duration_seconds: 1 },
    });
    expect(waitedTransition.status, JSON.stringify(waitedTransition.body)).toBe(200);
    for (const [operation, url, body] of [
      ['POST /v1/images/generations', '/v1/images/generations', { size: '512x512' }],
      ['POST /v1/videos/generations', '/v1/videos/generations', { prompt: 'x', duration_seconds: -1 }],
      ['POST /v1/videos/transitions', '/v1/videos/transitions', { end_image: png }],
    ] as const) {
      const bad = await documented(operation, url, { body });
      expect(bad.status, operation).toBe(400);
    }
    for (const accepted of [queued, video, transition]) {
      expect((await settled(accepted.body.id)).body.status).toBe('completed');
    }
    const polled = await documented('GET /api/v1/jobs/{id}', `/api/v1/jobs/${video.body.id}`);
    expect(polled.body.status).toBe('completed');
    // The console's view of a job: with its webhook's delivery once it has been made, and without.
    const details = await waitUntil(
      async () => {
        const answer = await documented(
          'GET /api/v1/jobs/{id}/details',
          `/api/v1/jobs/${queued.body.id}/details`,
        );
        return answer.body.webhook?.delivery?.status === 'delivered' ? answer : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 20, describe: () => 'the webhook to be delivered' },
    );
    expect(details.body).toMatchObject({
      object: 'job.details',
      mode: 'async',
      webhook: { url: hookUrl.split('?')[0] },
    });
    const plain = await documented('GET /api/v1/jobs/{id}/details', `/api/v1/jobs/${video.body.id}/details`);
    expect(plain.body.webhook).toBeNull();
    expect(
      (await documented('GET /api/v1/jobs/{id}/details', '/api/v1/jobs/job_nowhere/details')).status,
    ).toBe(404);

    // The file an image job made: its record, its bytes by key, by range, by ETag and by signed URL.
    const fileId = /\/v1\/files\/(file_[^/]+)\/content/.exec(images.body.data[0].url)?.[1] as string;
    const file = await documented('GET /v1/files/{id}', `/v1/files/${fileId}`);
    expect(file.body).toMatchObject({ id: fileId, content_type: 'image/png' });
    const content = `/v1/files/${fileId}/content`;
    const bytes = await documented('GET /v1/files/{id}/content', content);
    expect(bytes.status).toBe(200);
    const range = await documented('GET /v1/files/{id}/content', content, {
      headers: { range: 'bytes=0-9' },
    });
    expect(range.status).toBe(206);
    const unchanged = await documented('GET /v1/files/{id}/content', content, {
      headers: { 'if-none-match': bytes.headers.get('etag') as string },
    });
    expect(unchanged.status).toBe(304);
    const signed = new URL(file.body.url);
    const signedUrl = `${signed.pathname}${signed.search}`;
    const bySignature = await documented('GET /v1/files/{id}/content', signedUrl, { key: null });
    expect(bySignature.status).toBe(200);
    const forgedUrl = `${content}?expires=9999999999&signature=0`;
    const forged = await documented('GET /v1/files/{id}/content', forgedUrl, { key: null });
    expect(forged.status).toBe(403);
    const head = await fetch(`${kiln.url}${signedUrl}`, { method: 'HEAD' });
    expect([head.status, head.headers.get('content-type')]).toEqual([200, 'image/png']);
    expect((await documented('DELETE /v1/files/{id}', `/v1/files/${fileId}`)).body).toEqual({
      id: fileId,
      object: 'file',
      deleted: true,
    });
    for (const operation of ['GET /v1/files/{id}', 'DELETE /v1/files/{id}', 'GET /v1/files/{id}/content']) {
      const url = operation.endsWith('content') ? content : `/v1/files/${fileId}`;
      expect((await documented(operation, url, { key: member })).status, operation).toBe(404);
    }

    // Jobs: listed under both bases; one cancelled under each while it runs on the slow model.
    const list = await documented('GET /v1/jobs', '/v1/jobs?limit=100');
    expect(list.body.data.length).toBeGreaterThan(3);
    expect(
      (await documented('GET /api/v1/jobs', '/api/v1/jobs?kind=video.generation')).body.data,
    ).toHaveLength(2);
    expect((await documented('GET /v1/jobs', '/v1/jobs?status=nonsense')).status).toBe(400);
    const slowChat = () =>
      kiln.call('POST', '/v1/chat/completions', {
        body: { model: 'slow', messages: [{ role: 'user', content: 'hi' }], max_tokens: 400, mode: 'async' },
      });
    const [first, second] = [(await slowChat()).body.id, (await slowChat()).body.id];
    const busy = await documented('DELETE /v1/jobs/{id}', `/v1/jobs/${first}`);
    expect(busy.status).toBe(409);
    expect(busy.body.error.code).toBe('conflict');
    expect((await documented('POST /v1/jobs/{id}/cancel', `/v1/jobs/${first}/cancel`)).body.status).toBe(
      'cancelled',
    );
    expect(
      (await documented('POST /api/v1/jobs/{id}/cancel', `/api/v1/jobs/${second}/cancel`)).body.status,
    ).toBe('cancelled');
    const again = await documented('POST /v1/jobs/{id}/cancel', `/v1/jobs/${first}/cancel`);
    expect(again.status).toBe(409);
    expect((await documented('DELETE /v1/jobs/{id}', `/v1/jobs/${first}`)).body.deleted).toBe(true);
    expect((await documented('DELETE /api/v1/jobs/{id}', `/api/v1/jobs/${second}`)).body.deleted).toBe(true);
    expect((await documented('GET /v1/jobs/{id}', `/v1/jobs/${first}`)).status).toBe(410);
    for (const operation of [
      'GET /api/v1/jobs/{id}',
      'POST /api/v1/jobs/{id}/cancel',
      'DELETE /api/v1/jobs/{id}',
    ]) {
      const url = `/api/v1/jobs/job_nowhere${operation.endsWith('cancel') ? '/cancel' : ''}`;
      expect((await documented(operation, url)).status, operation).toBe(404);
    }

    const usage = await documented('GET /api/v1/usage', '/api/v1/usage');
    expect(usage.body.data.length).toBeGreaterThan(0);
    expect((await documented('GET /api/v1/usage', '/api/v1/usage?since=-1')).status).toBe(400);
    const daily = await documented('GET /api/v1/usage/daily', '/api/v1/usage/daily?days=2');
    expect(daily.body.data.map((row: { kind: string }) => row.kind)).toContain('video.generation');
    expect((await documented('GET /api/v1/usage/daily', '/api/v1/usage/daily?days=0')).status).toBe(400);
  });

  it('contexts: create, replace, list, fetch and delete by a name holding /; 400 and 404', async () => {
    const route = 'POST /api/v1/contexts';
    const saved = await documented(route, '/api/v1/contexts', {
      body: { name: 'team/style', content: 'Be brief.', description: 'house style' },
    });
    expect(saved.status).toBe(201);
    const replaced = await documented(route, '/api/v1/contexts', {
      body: { name: 'team/style', content: 'Be briefer.' },
    });
    expect([replaced.status, replaced.body.version]).toEqual([200, 2]);
    expect((await documented(route, '/api/v1/contexts', { body: { name: 'x' } })).status).toBe(400);
    // Conditional saves: create only, replace only the version read; each refusal is a 412.
    const body = { name: 'team/style', content: 'Be briefest.' };
    const taken = await documented(route, '/api/v1/contexts', { body, headers: { 'if-none-match': '*' } });
    expect([taken.status, taken.body.context?.version]).toEqual([412, 2]);
    const stale = await documented(route, '/api/v1/contexts', {
      body,
      headers: { 'if-match': saved.headers.get('etag') as string },
    });
    expect([stale.status, stale.body.error.code]).toEqual([412, 'context-changed']);
    const current = await documented(route, '/api/v1/contexts', {
      body,
      headers: { 'if-match': replaced.headers.get('etag') as string },
    });
    expect([current.status, current.body.version]).toEqual([200, 3]);

    expect((await documented('GET /api/v1/contexts', '/api/v1/contexts')).body.data).toHaveLength(1);
    expect((await documented('GET /api/v1/contexts', '/api/v1/contexts?limit=0')).status).toBe(400);
    const one = 'GET /api/v1/contexts/{id_or_name}';
    expect((await documented(one, '/api/v1/contexts/team/style')).body.content).toBe('Be briefest.');
    expect((await documented(one, `/api/v1/contexts/${saved.body.id}`)).body.name).toBe('team/style');
    expect((await documented(one, '/api/v1/contexts/team%2Fnowhere')).status).toBe(404);
    const remove = 'DELETE /api/v1/contexts/{id_or_name}';
    expect((await documented(remove, '/api/v1/contexts/team%2Fstyle')).body.deleted).toBe(true);
    expect((await documented(remove, '/api/v1/contexts/team/style')).status).toBe(404);
  });

  it('MCP: requests, a notification, the transport’s refusals and Kiln’s; GET and DELETE are 405', async () => {
    const headers = { accept: 'application/json, text/event-stream' };
    const initialize = await documented('POST /mcp', '/mcp', {
      headers,
      body: {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: '2025-06-18',
          capabilities: {},
          clientInfo: { name: 'test', version: '1' },
        },
      },
    });
    expect(initialize.status).toBe(200);
    const tools = await documented('POST /mcp', '/mcp', {
      headers,
      body: { jsonrpc: '2.0', id: 2, method: 'tools/list' },
    });
    expect(tools.body.result.tools.length).toBeGreaterThan(0);
    const notification = await documented('POST /mcp', '/mcp', {
      headers,
      body: { jsonrpc: '2.0', method: 'notifications/initialized' },
    });
    expect(notification.status).toBe(202);
    const unknownMethod = await documented('POST /mcp', '/mcp', {
      headers,
      body: { jsonrpc: '2.0', id: 3, method: 'nowhere' },
    });
    expect([unknownMethod.status, unknownMethod.body.error.code]).toEqual([200, -32601]);

    // Refusals: the transport's in JSON-RPC's terms, Kiln's (the key, the body) in the envelope.
    const notJsonRpc = await documented('POST /mcp', '/mcp', { headers, body: {} });
    expect([notJsonRpc.status, notJsonRpc.body.error.code]).toEqual([400, -32700]);
    const notJson = await documented('POST /mcp', '/mcp', { headers, body: '{' });
    expect([notJson.status, notJson.body.error.code]).toEqual([400, 'invalid-json']);
    const unacceptable = await documented('POST /mcp', '/mcp', {
      body: { jsonrpc: '2.0', id: 4, method: 'tools/list' },
    });
    expect(unacceptable.status).toBe(406);
    const text = await documented('POST /mcp', '/mcp', {
      headers: { ...headers, 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(text.status).toBe(415);
    expect((await documented('POST /mcp', '/mcp', { key: null, headers, body: {} })).status).toBe(401);
    for (const operation of ['GET /mcp', 'DELETE /mcp']) {
      expect((await documented(operation, '/mcp')).status, operation).toBe(405);
      expect((await documented(operation, '/mcp', { key: null })).status, operation).toBe(401);
    }
  });

  it('admin: organisations and keys for an admin key, 403 for a member, 400, 404 and 409', async () => {
    const calls: Array<[string, string, unknown?]> = [
      ['GET /admin/v1/orgs', '/admin/v1/orgs'],
      ['POST /admin/v1/orgs', '/admin/v1/orgs', { name: 'sneaky' }],
      ['PATCH /admin/v1/orgs/{name}', '/admin/v1/orgs/default', { limits: { concurrent: 0 } }],
      ['GET /admin/v1/keys', '/admin/v1/keys'],
      ['POST /admin/v1/keys', '/admin/v1/keys', { org: 'default', role: 'admin' }],
      ['PATCH /admin/v1/keys/{id}', '/admin/v1/keys/key_x', { tier: 'free' }],
      ['DELETE /admin/v1/keys/{id}', '/admin/v1/keys/key_x'],
      ['GET /admin/v1/fleet', '/admin/v1/fleet'],
    ];
    for (const [operation, url, body] of calls) {
      const refused = await documented(operation, url, { key: member, ...(body ? { body } : {}) });
      expect(refused.status, operation).toBe(403);
      expect(refused.body.error.code, operation).toBe('forbidden');
    }

    const org = await documented('POST /admin/v1/orgs', '/admin/v1/orgs', {
      body: { name: 'acme', limits: { tokens_per_day: 500 } },
    });
    expect(org.status).toBe(201);
    expect(
      (await documented('POST /admin/v1/orgs', '/admin/v1/orgs', { body: { name: 'acme' } })).status,
    ).toBe(409);
    expect(
      (await documented('POST /admin/v1/orgs', '/admin/v1/orgs', { body: { name: '../x' } })).status,
    ).toBe(400);
    const patched = await documented('PATCH /admin/v1/orgs/{name}', '/admin/v1/orgs/acme', {
      body: { limits: { concurrent: 2, tokens_per_day: null } },
    });
    expect(patched.body.limits).toEqual({ concurrent: 2 });
    expect(
      (await documented('PATCH /admin/v1/orgs/{name}', '/admin/v1/orgs/nowhere', { body: { limits: {} } }))
        .status,
    ).toBe(404);
    expect((await documented('GET /admin/v1/orgs', '/admin/v1/orgs')).body.data.length).toBeGreaterThan(1);

    const key = await documented('POST /admin/v1/keys', '/admin/v1/keys', {
      body: { org: 'acme', tier: 'free', name: 'ci', limits: { requests_per_minute: 10 } },
    });
    expect(key.status).toBe(201);
    expect(
      (await documented('POST /admin/v1/keys', '/admin/v1/keys', { body: { org: 'nowhere' } })).status,
    ).toBe(404);
    expect((await documented('GET /admin/v1/keys', '/admin/v1/keys?org=acme')).body.data).toHaveLength(1);
    const keyUrl = `/admin/v1/keys/${key.body.id}`;
    const changed = await documented('PATCH /admin/v1/keys/{id}', keyUrl, { body: { tier: 'standard' } });
    expect(changed.body.tier).toBe('standard');
    expect((await documented('PATCH /admin/v1/keys/{id}', keyUrl, { body: {} })).status).toBe(400);
    expect((await documented('DELETE /admin/v1/keys/{id}', keyUrl)).body.revoked_at).toEqual(
      expect.any(Number),
    );
    expect((await documented('DELETE /admin/v1/keys/{id}', keyUrl)).status).toBe(404);
    expect((await documented('GET /v1/models', '/v1/models', { key: key.body.key })).status).toBe(401);

    const fleet = await documented('GET /admin/v1/fleet', '/admin/v1/fleet');
    expect(fleet.body.pools.map((pool: { name: string }) => pool.name).sort()).toEqual(['quick', 'slow']);
    expect(fleet.body.runners.map((runner: { name: string }) => runner.name)).toEqual(['gpu']);
    expect(JSON.stringify(fleet.body)).not.toContain('127.0.0.1');
  });

  it('session: who the key is, for a member and an admin; 401 without a key', async () => {
    const session = await documented('GET /api/v1/session', '/api/v1/session', { key: member });
    expect(session.body).toMatchObject({
      object: 'session',
      key: { role: 'member' },
      org: { name: 'default' },
    });
    expect(JSON.stringify(session.body)).not.toContain(member);
    expect((await documented('GET /api/v1/session', '/api/v1/session')).body.key.role).toBe('admin');
    expect((await documented('GET /api/v1/session', '/api/v1/session', { key: null })).status).toBe(401);
  });

  it('has checked an answer of every operation in the document', () => {
    expect([...exercised].sort()).toEqual(documentedOperations(doc).sort());
  });
});
