import type { Context, Span } from '@opentelemetry/api';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { contextOf, failSpan, SpanKind, startSpan, tracingOn, withContext } from './spans.js';

/** Probes a load balancer sends every few seconds: spans of them would bury the requests. */
const UNTRACED_ROUTES = new Set(['/healthz', '/readyz']);

interface RequestSpan {
  span: Span;
  context: Context;
}

/**
 * A server span per HTTP request, child of the caller's `traceparent` when it sends one, and
 * active while the request is handled, so the job it submits carries it. Named by the route's
 * pattern (`POST /v1/chat/completions`), never the URL: paths hold ids and query strings secrets.
 * Installs nothing while tracing is off.
 */
export function traceRequests(app: FastifyInstance): void {
  if (!tracingOn()) return;
  const spans = new WeakMap<FastifyRequest, RequestSpan>();

  app.addHook('onRequest', function startRequestSpan(request, reply, done) {
    const route = request.routeOptions.url;
    if (route !== undefined && UNTRACED_ROUTES.has(route)) return done();
    const started = startSpan(route === undefined ? request.method : `${request.method} ${route}`, {
      kind: SpanKind.SERVER,
      parent: contextOf(request.headers),
      attributes: {
        'http.request.method': request.method,
        ...(route === undefined ? {} : { 'http.route': route }),
        'kiln.request_id': request.id,
      },
    });
    if (!started) return done();
    spans.set(request, started);
    // A client gone after sending its whole body: neither onResponse nor onRequestAbort runs.
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) end(request, undefined);
    });
    // Everything after this hook (body parsing included: Fastify keeps the async context) runs in it.
    withContext(started.context, done);
  });

  function end(request: FastifyRequest, status: number | undefined): void {
    const traced = spans.get(request);
    if (!traced) return;
    spans.delete(request);
    if (status !== undefined) {
      traced.span.setAttribute('http.response.status_code', status);
      // A server span fails on 5xx only; a 4xx is the caller's error.
      if (status >= 500) failSpan(traced.span, String(status));
    } else traced.span.setAttribute('kiln.aborted', true);
    traced.span.end();
  }
  app.addHook('onResponse', function endRequestSpan(request, reply, done) {
    end(request, reply.statusCode);
    done();
  });
  app.addHook('onRequestAbort', function endAbortedRequestSpan(request, done) {
    end(request, undefined);
    done();
  });
}
