import type { onRequestHookHandler, onResponseHookHandler } from 'fastify';
import { LeanCounter, LeanHistogram } from './lean.js';

const requests = new LeanCounter(
  'kiln_http_requests_total',
  'HTTP requests answered, by method, route pattern and status code; 499 when the client went away first.',
  ['method', 'route', 'status'],
);

const duration = new LeanHistogram(
  'kiln_http_request_duration_seconds',
  'Time from request to the last byte of the response (a stream’s whole length) or to the client going away, by method and route pattern.',
  ['method', 'route'],
  [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
);

/** The label of a request no route matched (a 404 from the router, a 405 before routing). */
export const UNMATCHED_ROUTE = 'unmatched';

/** The status of a request whose client went away before its response ended (nginx's). */
export const CLIENT_CLOSED = '499';

/**
 * Counts and times every request once its last byte is sent, or once its client goes away first
 * (then as status 499: Fastify runs no onResponse for it). Labels carry the route's pattern
 * (`/v1/jobs/:id`), never the URL, so ids and query strings cannot grow the series without bound.
 */
export function httpMetrics(): { onRequest: onRequestHookHandler; onResponse: onResponseHookHandler } {
  const count = (request: Parameters<onRequestHookHandler>[0], status: string, seconds: number) => {
    const route = request.routeOptions.url ?? UNMATCHED_ROUTE;
    requests.inc(request.method, route, status);
    duration.observe(seconds, request.method, route);
  };
  return {
    onRequest: function watchForClientGone(request, reply, done) {
      reply.raw.once('close', () => {
        if (!reply.raw.writableFinished) count(request, CLIENT_CLOSED, reply.elapsedTime / 1000);
      });
      done();
    },
    // A response that errored before its end is counted by its close instead, never twice.
    onResponse: function countHttpResponse(request, reply, done) {
      if (reply.raw.writableFinished) count(request, String(reply.statusCode), reply.elapsedTime / 1000);
      done();
    },
  };
}
