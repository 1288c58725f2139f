import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { limitMetrics } from '../limits/metrics.js';
import { routeMetrics } from '../router/metrics.js';
import { leanMetrics } from './lean.js';
import { collectProcessMetrics, registry } from './registry.js';
import { scrapeGauges } from './scrape.js';
import { storeLatencyMetrics } from './store.js';

/**
 * GET /metrics (any key, or none with `metrics.open`): Prometheus text format. prom-client's registry (process, build), the
 * gauges read at scrape time (queue, runners), the request path's lean families (HTTP, jobs,
 * engines, webhooks), then those written by hand (store latency, routing, replicas, limits).
 * A store that does not answer costs the queue gauges only. docs/metrics.md lists them all.
 */
export function metricsRoutes(app: FastifyInstance, deps: AppDeps): void {
  collectProcessMetrics();
  const scraped = scrapeGauges({
    store: deps.store,
    kinds: () => deps.jobs.kinds.names(),
    runners: () => deps.runtime.runners.runners,
  });
  app.get('/metrics', async (request, reply) => {
    await scraped.refresh(request.log);
    const families = [
      await registry.metrics(),
      await scraped.registry.metrics(),
      leanMetrics(),
      storeLatencyMetrics(),
      routeMetrics(),
      deps.runtime.router().fleet.metrics(),
      limitMetrics(deps.runtime.limiter),
    ];
    return reply.type(registry.contentType).send(`${families.map((text) => text.trimEnd()).join('\n')}\n`);
  });
}
