import type { onResponseHookHandler } from 'fastify';
import { Counter, Histogram } from 'prom-client';
import { childOf, registry } from './registry.js';

const requests = new Counter({
  name: 'kiln_http_requests_total',
  help: 'HTTP responses sent, by method, route pattern and status code.',
  labelNames: ['method', 'route', 'status'],
  registers: [registry],
});

const duration = new Histogram({
  name: 'kiln_http_request_duration_seconds',
  help: 'Time from request to the last byte of the response (a stream’s whole length), by method and route pattern.',
  labelNames: ['method', 'route'],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  registers: [registry],
});

const requestChildren = new Map<string, ReturnType<typeof requests.labels>>();
const durationChildren = new Map<string, ReturnType<typeof duration.labels>>();

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
    childOf(requestChildren, requests, method, route, String(reply.statusCode)).inc();
    childOf(durationChildren, duration, method, route).observe(reply.elapsedTime / 1000);
    done();
  };
}
