import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { limitMetrics } from '../limits/metrics.js';
import { routeMetrics } from '../router/metrics.js';
import type { Runtime } from '../runtime.js';
import { leanMetrics } from './lean.js';
import { collectProcessMetrics, registry } from './registry.js';
import { scrapeGauges } from './scrape.js';
import { storeLatencyMetrics } from './store.js';

/** The Prometheus text content type of a scrape. */
export const METRICS_CONTENT_TYPE = registry.contentType;

/**
 * This process's metrics as Prometheus text: prom-client's registry (process, build), the gauges
 * read at scrape time (queue, runners), the request path's lean families (HTTP, jobs, engines,
 * webhooks), then those written by hand (store latency, routing, replicas, limits). A store that
 * does not answer costs the queue gauges only. docs/metrics.md lists them all.
 */
export function metricsText(runtime: Runtime): (log: FastifyBaseLogger) => Promise<string> {
  collectProcessMetrics();
  const scraped = scrapeGauges({
    store: runtime.store,
    kinds: () => runtime.jobs.kinds.names(),
    runners: () => runtime.runners.runners,
  });
  return async (log) => {
    await scraped.refresh(log);
    const families = [
      await registry.metrics(),
      await scraped.registry.metrics(),
      leanMetrics(),
      storeLatencyMetrics(),
      routeMetrics(),
      runtime.router().fleet.metrics(),
      limitMetrics(runtime.limiter),
    ];
    return `${families.map((text) => text.trimEnd()).join('\n')}\n`;
  };
}

/** GET /metrics (any key, or none with `metrics.open`): Prometheus text format. */
export function metricsRoutes(app: FastifyInstance, deps: AppDeps): void {
  const render = metricsText(deps.runtime);
  app.get('/metrics', async (request, reply) =>
    reply.type(METRICS_CONTENT_TYPE).send(await render(request.log)),
  );
}
