import type { onResponseHookHandler } from 'fastify';
import { LeanCounter, LeanHistogram } from './lean.js';

const requests = new LeanCounter(
  'kiln_http_requests_total',
  'HTTP responses sent, by method, route pattern and status code.',
  ['method', 'route', 'status'],
);

const duration = new LeanHistogram(
  'kiln_http_request_duration_seconds',
  'Time from request to the last byte of the response (a stream’s whole length), by method and route pattern.',
  ['method', 'route'],
  [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
);

/** The label of a request no route matched (a 404 from the router, a 405 before routing). */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * Counts and times every response once its last byte is sent. Labels carry the route's pattern
 * (`/v1/jobs/:id`), never the URL, so ids and query strings cannot grow the series without bound.
 */
export function httpMetrics(): onResponseHookHandler {
  return function countHttpResponse(request, reply, done) {
    const route = request.routeOptions.url ?? UNMATCHED_ROUTE;
    const method = request.method;
    requests.inc(method, route, String(reply.statusCode));
    duration.observe(reply.elapsedTime / 1000, method, route);
    done();
  };
}
