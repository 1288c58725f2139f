import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool, until } from '../chat/fleet.js';
import { sample } from '../helpers/scrape.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';
import { type ExportedSpan, type OtlpReceiver, startOtlpReceiver } from './recorders.js';

/*
 * A client that goes away after sending its whole request, while the engine still generates: a
 * stream dropped after its first chunk, and a sync request given up on. Its trace must still be
 * whole (the HTTP server span exported, everything below it its child) and its request counted;
 * and a cancel is no failure of any span, where an engine's refusal is one, recorded by its code.
 */

const CHAT = '/v1/chat/completions';
const DROPPED_499 = `kiln_http_requests_total{method="POST",route="${CHAT}",status="499"}`;
const CANCELLED = 'kiln_jobs_finished_total{kind="chat",status="cancelled"}';
/** OTLP's status code of a failed span. */
const STATUS_ERROR = 2;

let sims: LlmSim[] = [];
let otlp: OtlpReceiver;

beforeAll(async () => {
  // Slow enough (200 tokens at 50 ms) that every request is still generating when its client goes.
  sims = await simPool(1, { decodeMsPerToken: 50 });
  otlp = await startOtlpReceiver();
});

afterAll(async () => {
  await otlp?.close();
  await closeAll(sims);
});

/** A chat request sent with `fetch`, whose caller can give up on it. */
function chat(kiln: TestServer, requestId: string, stream: boolean, signal: AbortSignal) {
  return fetch(`${kiln.url}${CHAT}`, {
    method: 'POST',
    signal,
    headers: {
      authorization: `Bearer ${kiln.adminKey}`,
      'content-type': 'application/json',
      'x-request-id': requestId,
    },
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 200,
      stream,
    }),
  });
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a client that goes away mid-request: ${caseTitle(storeCase)}`, () => {
    let spans: ExportedSpan[];
    let before: string;
    let after: string;

    beforeAll(async () => {
      otlp.spans.length = 0;
      const kiln = await startTestServer(storeCase, {
        engines: { e: engine('unique', sims) },
        'telemetry.otlp_endpoint': otlp.endpoint,
      });
      try {
        before = (await kiln.call('GET', '/metrics')).body as string;
        const streamed = new AbortController();
        const stream = await chat(kiln, 'dropped-stream', true, streamed.signal);
        expect(stream.status).toBe(200);
        await (stream.body as ReadableStream).getReader().read();
        streamed.abort();
        const synced = new AbortController();
        const sync = chat(kiln, 'dropped-sync', false, synced.signal).catch((error: Error) => error.name);
        await sleep(300);
        synced.abort();
        expect(await sync).toBe('AbortError');
        // Both jobs are cancelled once the server hears the client go.
        await until(
          async () => {
            after = (await kiln.call('GET', '/metrics')).body as string;
            return (sample(after, CANCELLED) ?? 0) - (sample(before, CANCELLED) ?? 0) === 2;
          },
          5000,
          'both jobs cancelled',
        );
        // For comparison, a real failure: the engine refuses the request.
        await (sims[0] as LlmSim).setFault({ kind: 'error', status: 400, message: 'no' });
        const refused = await kiln.call('POST', CHAT, {
          headers: { 'x-request-id': 'refused' },
          body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
        });
        expect(refused.status).toBe(400);
      } finally {
        await (sims[0] as LlmSim).setFault(undefined);
        // Stopping flushes the spans still batched.
        await kiln.close();
      }
      spans = [...otlp.spans];
    }, 30_000);

    it('counts each dropped request as status 499, and times it', () => {
      const grew = (series: string) => (sample(after, series) ?? 0) - (sample(before, series) ?? 0);
      expect(grew(DROPPED_499)).toBe(2);
      expect(grew(`kiln_http_request_duration_seconds_count{method="POST",route="${CHAT}"}`)).toBe(2);
      expect(grew(`kiln_http_requests_total{method="POST",route="${CHAT}",status="200"}`)).toBe(0);
    });

    for (const requestId of ['dropped-stream', 'dropped-sync']) {
      it(`${requestId}: its server span is exported, marked aborted, and the job span is its child`, () => {
        const http = spans.filter((s) => s.attributes['kiln.request_id'] === requestId);
        expect(http, spans.map((s) => s.name).join(', ')).toHaveLength(1);
        const [server] = http as [ExportedSpan];
        expect(server.attributes).toMatchObject({ 'http.route': CHAT, 'kiln.aborted': true });
        expect(server.attributes['http.response.status_code']).toBeUndefined();
        const job = spans.filter((s) => s.name === 'job' && s.parentSpanId === server.spanId);
        expect(job).toHaveLength(1);
      });
    }

    /** The job, router and engine spans under a request's server span, top down. */
    function below(requestId: string): { job: ExportedSpan; router: ExportedSpan; engine: ExportedSpan } {
      const childOf = (parent: ExportedSpan | undefined, name: string) => {
        const found = spans.filter((s) => s.name === name && s.parentSpanId === parent?.spanId);
        expect(found, `the ${name} span under ${requestId}`).toHaveLength(1);
        return found[0] as ExportedSpan;
      };
      const server = spans.find((s) => s.attributes['kiln.request_id'] === requestId);
      const job = childOf(server, 'job');
      const router = childOf(job, 'router');
      return { job, router, engine: childOf(router, 'engine') };
    }

    for (const requestId of ['dropped-stream', 'dropped-sync']) {
      it(`${requestId}: the job span says cancelled, and no span below it is failed`, () => {
        const { job, router, engine } = below(requestId);
        expect(job.attributes).toMatchObject({ 'kiln.job.status': 'cancelled', 'kiln.cancelled': true });
        for (const span of [job, router, engine]) {
          expect(span.status.code, span.name).not.toBe(STATUS_ERROR);
          expect(span.attributes['error.type'], span.name).toBeUndefined();
        }
        expect(router.attributes['kiln.cancelled']).toBe(true);
        expect(engine.attributes['kiln.cancelled']).toBe(true);
      });
    }

    it('an engine’s refusal fails the job, router and engine spans, each with its error code', () => {
      const { job, router, engine } = below('refused');
      expect(job.attributes).toMatchObject({ 'kiln.job.status': 'failed', 'error.type': 'engine-rejected' });
      for (const span of [router, engine]) {
        expect(span.status.code, span.name).toBe(STATUS_ERROR);
        expect(span.attributes['error.type'], span.name).toBe('engine-rejected');
        expect(span.attributes['kiln.cancelled'], span.name).toBeUndefined();
      }
    });
  });
}
