import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, simPool, until } from '../chat/fleet.js';
import { type KilnProcess, startWorkerProcess } from '../helpers/process.js';
import { startTestServer, type TestServer, workerEnv } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';
import {
  type ExportedSpan,
  type HookReceiver,
  type OtlpReceiver,
  parseTraceparent,
  type RecordingProxy,
  SPAN_KIND,
  startHookReceiver,
  startOtlpReceiver,
  startRecordingProxy,
} from './recorders.js';

/*
 * Traces end to end: the real server, the LLM and ComfyUI simulators behind recording proxies (they
 * see every request head Kiln sends them), a webhook receiver, and an OTLP/HTTP receiver that
 * decodes what the exporter posts. Everything listens on 127.0.0.1.
 */

/** Words that must reach the engine and never a trace. */
const PROMPT = 'tell me about the zebra-quartz-7731 kiln';
const HOOK_TOKEN = 'hook-token-5521';
/** A caller's own trace, which Kiln's request span must join. */
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

let llm: LlmSim[] = [];
let comfy: ComfySim;
let llmProxy: RecordingProxy;
let comfyProxy: RecordingProxy;
let otlp: OtlpReceiver;
let hooks: HookReceiver;

beforeAll(async () => {
  llm = await simPool(1);
  comfy = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2 });
  llmProxy = await startRecordingProxy((llm[0] as LlmSim).url);
  comfyProxy = await startRecordingProxy(comfy.url);
  otlp = await startOtlpReceiver();
  hooks = await startHookReceiver();
}, 60_000);

afterAll(async () => {
  await Promise.all([llmProxy?.close(), comfyProxy?.close(), otlp?.close(), hooks?.close()]);
  await closeAll(llm);
  await comfy?.close();
});

const fleet = () => ({
  engines: { local: { serves: 'unique', replicas: [llmProxy.url], models: { m: 'sim-model' } } },
  runners: { gpu: { url: comfyProxy.url, models: ['sdxl'] } },
  'security.allow_hosts': ['127.0.0.1'],
  'jobs.poll_interval_ms': 100,
});

const chatBody = (extra: Record<string, unknown> = {}) => ({
  model: 'm',
  messages: [{ role: 'user', content: PROMPT }],
  max_tokens: 4,
  ...extra,
});

/**
 * The three requests of the issue: a sync chat, an async chat with a webhook (sent with the
 * caller's `traceparent`), and a sync image. Answers each request's `x-request-id`.
 */
async function workload(kiln: TestServer): Promise<{ sync: string; async: string; image: string }> {
  const sync = await kiln.call('POST', '/v1/chat/completions', { body: chatBody() });
  expect(sync.status, JSON.stringify(sync.body)).toBe(200);
  const hitsBefore = hooks.hits.length;
  const queued = await kiln.call('POST', '/v1/chat/completions', {
    headers: { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
    body: chatBody({ mode: 'async', webhook: { url: `${hooks.url}/hook?token=${HOOK_TOKEN}` } }),
  });
  expect(queued.status, JSON.stringify(queued.body)).toBe(202);
  await until(() => hooks.hits.length > hitsBefore, 10_000, 'the webhook delivery');
  const image = await kiln.call('POST', '/v1/images/generations', {
    body: { prompt: PROMPT, size: '512x512' },
  });
  expect(image.status, JSON.stringify(image.body)).toBe(200);
  return {
    sync: sync.headers.get('x-request-id') as string,
    async: queued.headers.get('x-request-id') as string,
    image: image.headers.get('x-request-id') as string,
  };
}

/** The one span that `match` accepts; fails naming what was exported otherwise. */
function only(spans: ExportedSpan[], what: string, match: (span: ExportedSpan) => boolean): ExportedSpan {
  const found = spans.filter(match);
  expect(
    found,
    `${what} among ${spans.map((s) => `${s.name}(${s.spanId}<-${s.parentSpanId})`).join(', ')}`,
  ).toHaveLength(1);
  return found[0] as ExportedSpan;
}

const childOf = (parent: ExportedSpan) => (span: ExportedSpan) =>
  span.traceId === parent.traceId && span.parentSpanId === parent.spanId;

/** A request's HTTP server span, found by the request id Kiln answered with. */
const requestSpan = (spans: ExportedSpan[], requestId: string) =>
  only(spans, `the HTTP span of ${requestId}`, (s) => s.attributes['kiln.request_id'] === requestId);

// First, while nothing in this process has turned tracing on.
describe('tracing off (no endpoint)', () => {
  let postsBefore: number;

  beforeAll(async () => {
    llmProxy.clear();
    comfyProxy.clear();
    hooks.hits.length = 0;
    postsBefore = otlp.posts;
    const kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], fleet());
    try {
      await workload(kiln);
    } finally {
      await kiln.close();
    }
  }, 60_000);

  it('loads nothing of the OpenTelemetry SDK', () => {
    // Its packages are CommonJS, so once loaded they are in the module cache — as the API is (the
    // no-op tracer Kiln calls, which prom-client loads anyway).
    const loaded = Object.keys(createRequire(import.meta.url).cache);
    expect(loaded.some((file) => file.includes('@opentelemetry/api/'))).toBe(true);
    expect(loaded.filter((file) => /@opentelemetry\/(?!api\/)/.test(file))).toEqual([]);
  });

  it('sends no traceparent to the engine, the runner or the webhook receiver, and posts nothing', () => {
    const engineCalls = llmProxy.requests().filter((r) => r.path === '/v1/chat/completions');
    expect(engineCalls).toHaveLength(2);
    const runnerCalls = comfyProxy.requests().filter((r) => r.path === '/prompt');
    expect(runnerCalls).toHaveLength(1);
    const everything = [...llmProxy.requests(), ...comfyProxy.requests(), ...hooks.hits];
    expect(everything.filter((r) => r.headers.traceparent !== undefined)).toEqual([]);
    expect(hooks.hits).toHaveLength(1);
    expect(otlp.posts).toBe(postsBefore);
  });
});

describe('tracing on (telemetry.otlp_endpoint set), SQLite', () => {
  let ids: { sync: string; async: string; image: string };
  let spans: ExportedSpan[];
  let adminKey: string;

  beforeAll(async () => {
    llmProxy.clear();
    comfyProxy.clear();
    hooks.hits.length = 0;
    const kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      ...fleet(),
      'telemetry.otlp_endpoint': otlp.endpoint,
      'telemetry.service_name': 'kiln-under-test',
    });
    adminKey = kiln.adminKey;
    try {
      ids = await workload(kiln);
    } finally {
      // Stopping flushes the spans still batched.
      await kiln.close();
    }
    spans = [...otlp.spans];
  }, 60_000);

  it('a sync chat is one trace: HTTP server span → job → router → engine, each the child of the one before', () => {
    const http = requestSpan(spans, ids.sync);
    expect(http).toMatchObject({
      name: 'POST /v1/chat/completions',
      kind: SPAN_KIND.server,
      parentSpanId: '',
      service: 'kiln-under-test',
    });
    expect(http.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 200,
    });
    const job = only(spans, 'the job span', (s) => s.name === 'job' && childOf(http)(s));
    expect(job.attributes).toMatchObject({
      'kiln.job.kind': 'chat',
      'kiln.job.attempt': 1,
      'kiln.job.status': 'completed',
    });
    expect(job.attributes['kiln.job.id']).toMatch(/^[0-9a-f-]{36}$/);
    const router = only(spans, 'the router span', (s) => s.name === 'router' && childOf(job)(s));
    expect(router.attributes).toMatchObject({
      'kiln.route.class': 'unique',
      'kiln.route.engine': 'local',
      'kiln.route.replica': 0,
      'kiln.model': 'm',
    });
    const engine = only(spans, 'the engine span', (s) => s.name === 'engine' && childOf(router)(s));
    expect(engine.kind).toBe(SPAN_KIND.client);
    expect(engine.attributes).toMatchObject({
      'kiln.engine': 'local',
      'kiln.replica': 0,
      'server.address': '127.0.0.1',
    });
  });

  it('the engine request carries traceparent naming the engine span, in the request’s trace', () => {
    const http = requestSpan(spans, ids.sync);
    const engine = only(spans, 'the engine span', (s) => s.name === 'engine' && s.traceId === http.traceId);
    const calls = llmProxy.requests().filter((r) => r.method === 'POST' && r.path === '/v1/chat/completions');
    expect(calls.map((c) => parseTraceparent(c.headers.traceparent))).toContainEqual({
      traceId: http.traceId,
      spanId: engine.spanId,
    });
    // Health checks and probes run outside any request: they carry none.
    const probes = llmProxy.requests().filter((r) => r.method === 'GET');
    expect(probes.length).toBeGreaterThan(0);
    expect(probes.filter((r) => r.headers.traceparent)).toEqual([]);
  });

  it('an async chat joins the caller’s trace, and its webhook attempt is a span of that trace whose context the receiver gets', () => {
    const http = requestSpan(spans, ids.async);
    expect(http).toMatchObject({ traceId: CALLER_TRACE, parentSpanId: CALLER_SPAN });
    const job = only(spans, 'the job span', (s) => s.name === 'job' && childOf(http)(s));
    const router = only(spans, 'the router span', (s) => s.name === 'router' && childOf(job)(s));
    only(spans, 'the engine span', (s) => s.name === 'engine' && childOf(router)(s));
    const webhook = only(spans, 'the webhook span', (s) => s.name === 'webhook' && childOf(http)(s));
    expect(webhook.kind).toBe(SPAN_KIND.client);
    expect(webhook.attributes).toMatchObject({
      'kiln.webhook.attempt': 1,
      'kiln.webhook.event': 'job.completed',
      'kiln.job.id': job.attributes['kiln.job.id'],
      'http.response.status_code': 200,
      'server.address': '127.0.0.1',
    });
    expect(hooks.hits).toHaveLength(1);
    expect(parseTraceparent(hooks.hits[0]?.headers.traceparent as string)).toEqual({
      traceId: CALLER_TRACE,
      spanId: webhook.spanId,
    });
  });

  it('an image job is HTTP → job → engine, and every request to the ComfyUI runner carries the engine span’s traceparent', () => {
    const http = requestSpan(spans, ids.image);
    expect(http.name).toBe('POST /v1/images/generations');
    const job = only(spans, 'the job span', (s) => s.name === 'job' && childOf(http)(s));
    expect(job.attributes['kiln.job.kind']).toBe('image.generation');
    const engine = only(spans, 'the runner span', (s) => s.name === 'engine' && childOf(job)(s));
    expect(engine).toMatchObject({ kind: SPAN_KIND.client });
    expect(engine.attributes).toMatchObject({ 'kiln.runner': 'gpu', 'kiln.model': 'sdxl' });
    const run = comfyProxy.requests().filter((r) => r.path !== '/system_stats');
    // The socket, the prompt, its history and its files.
    expect(run.map((r) => `${r.method} ${r.path.split('?')[0]}`)).toEqual(
      expect.arrayContaining(['GET /ws', 'POST /prompt', 'GET /view']),
    );
    for (const request of run) {
      expect(parseTraceparent(request.headers.traceparent), `${request.method} ${request.path}`).toEqual({
        traceId: http.traceId,
        spanId: engine.spanId,
      });
    }
  });

  it('no prompt, key, webhook token or URL query string is ever exported', () => {
    const exported = otlp.bodies.join('\n');
    expect(exported.length).toBeGreaterThan(0);
    expect(exported).not.toContain('zebra-quartz');
    expect(exported).not.toContain(HOOK_TOKEN);
    expect(exported).not.toContain('?');
    expect(exported).not.toContain(adminKey);
  });
});

const pgCase = storeCases[1] as (typeof storeCases)[1];

describe.skipIf(pgCase.skip)(`a job run by another process: ${caseTitle(pgCase)}`, () => {
  let spans: ExportedSpan[];
  let requestId: string;
  let worker: KilnProcess | undefined;

  beforeAll(async () => {
    const configDir = mkdtempSync(path.join(tmpdir(), 'kiln-traces-'));
    llmProxy.clear();
    hooks.hits.length = 0;
    otlp.spans.length = 0;
    // The gateway only serves HTTP; the worker, a process of its own, runs the job and the webhook.
    const kiln = await startTestServer(pgCase, {
      ...fleet(),
      'jobs.workers': 0,
      'telemetry.otlp_endpoint': otlp.endpoint,
      'telemetry.service_name': 'kiln-gateway',
    });
    try {
      const configFile = path.join(configDir, 'kiln.yaml');
      writeFileSync(configFile, JSON.stringify({ engines: fleet().engines }));
      worker = await startWorkerProcess({
        ...workerEnv(kiln, configFile),
        KILN_TELEMETRY_OTLP_ENDPOINT: otlp.endpoint,
        KILN_TELEMETRY_SERVICE_NAME: 'kiln-worker',
      });
      const queued = await kiln.call('POST', '/v1/chat/completions', {
        body: chatBody({ mode: 'async', webhook: { url: `${hooks.url}/hook` } }),
      });
      expect(queued.status, JSON.stringify(queued.body)).toBe(202);
      requestId = queued.headers.get('x-request-id') as string;
      await until(() => hooks.hits.length > 0, 15_000, 'the webhook delivery from the worker');
      // Each process flushes what it batched as it stops.
      worker.child.kill('SIGTERM');
      await worker.exited;
    } finally {
      await worker?.kill();
      await kiln.close();
      rmSync(configDir, { recursive: true, force: true });
    }
    spans = [...otlp.spans];
  }, 90_000);

  it('the job span, exported by the worker, is the child of the gateway’s request span, and so on down to the engine and the webhook', () => {
    const http = requestSpan(spans, requestId);
    expect(http.service).toBe('kiln-gateway');
    const job = only(spans, 'the job span', (s) => s.name === 'job' && childOf(http)(s));
    expect(job.service).toBe('kiln-worker');
    const router = only(spans, 'the router span', (s) => s.name === 'router' && childOf(job)(s));
    const engine = only(spans, 'the engine span', (s) => s.name === 'engine' && childOf(router)(s));
    const webhook = only(spans, 'the webhook span', (s) => s.name === 'webhook' && childOf(http)(s));
    expect(webhook.service).toBe('kiln-worker');
    const call = llmProxy.requests().find((r) => r.path === '/v1/chat/completions');
    expect(parseTraceparent(call?.headers.traceparent)).toEqual({
      traceId: http.traceId,
      spanId: engine.spanId,
    });
    expect(parseTraceparent(hooks.hits[0]?.headers.traceparent as string)).toEqual({
      traceId: http.traceId,
      spanId: webhook.spanId,
    });
  });
});
