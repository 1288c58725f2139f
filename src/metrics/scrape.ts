import type { FastifyBaseLogger } from 'fastify';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Store } from '../store/index.js';

/**
 * How long a scrape waits for the store's queue figures: a store that is down or stuck must not
 * take the rest of /metrics with it, nor hold the scrape past Prometheus's own timeout.
 */
export const SCRAPE_STORE_TIMEOUT_MS = 1000;

export interface ScrapeSources {
  store: Store;
  /** The job kinds this process runs: each gets its series, 0 when it has no jobs. */
  kinds(): string[];
  /** The ComfyUI runners as they stand, read at each scrape. */
  runners(): ReadonlyArray<{
    name: string;
    inFlight: number;
    healthy: boolean;
    config: { max_concurrency: number };
  }>;
}

/**
 * Gauges read when /metrics is scraped, not kept up to date as things change: the queue from one
 * grouped query over the unfinished jobs, the runners from their counters in memory. They belong to
 * one app's store and runners, so each app has its own registry of them. When the store gives no
 * answer in time, the queue's series are left out and the failure counted; the rest is served.
 */
export function scrapeGauges(sources: ScrapeSources): {
  refresh(log: FastifyBaseLogger): Promise<void>;
  registry: Registry;
} {
  const registry = new Registry();
  const gauge = (name: string, help: string, labelNames: string[]) =>
    new Gauge({ name, help, labelNames, registers: [registry] });
  const queued = gauge('kiln_jobs_queued', 'Jobs waiting in the queue (the whole store), by kind.', ['kind']);
  const running = gauge('kiln_jobs_running', 'Jobs running (the whole store), by kind.', ['kind']);
  const oldest = gauge(
    'kiln_jobs_oldest_queued_age_seconds',
    'Age of the oldest queued job (since its creation), by kind; 0 when none waits.',
    ['kind'],
  );
  const progress = gauge(
    'kiln_jobs_running_progress_ratio',
    'Mean progress (0 to 1) of the running jobs, by kind, as their workers last reported it; 0 when none runs.',
    ['kind'],
  );
  const inFlight = gauge(
    'kiln_runner_in_flight',
    'Workflows this process has running on each ComfyUI runner.',
    ['runner'],
  );
  const capacity = gauge(
    'kiln_runner_max_concurrency',
    'Workflows this process may run at once on each ComfyUI runner (its max_concurrency).',
    ['runner'],
  );
  const available = gauge(
    'kiln_runner_available',
    '1 when the ComfyUI runner answered its last health check (GET /system_stats), else 0.',
    ['runner'],
  );

  const storeErrors = new Counter({
    name: 'kiln_store_scrape_errors_total',
    help: 'Scrapes served without the queue gauges: the store did not answer (in time).',
    registers: [registry],
  });

  /** The unfinished jobs by kind and status, or undefined when the store fails or is late. */
  async function readQueue(log: FastifyBaseLogger) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), SCRAPE_STORE_TIMEOUT_MS);
    });
    try {
      const rows = await Promise.race([sources.store.jobs.unfinishedByKind(), late]);
      if (rows !== 'late') return rows;
      log.warn(
        `the store did not answer within ${SCRAPE_STORE_TIMEOUT_MS} ms: no queue gauges in this scrape`,
      );
    } catch (error) {
      log.warn({ err: error }, 'the store is unreachable: no queue gauges in this scrape');
    } finally {
      clearTimeout(timer);
    }
    storeErrors.inc();
    return undefined;
  }

  return {
    registry,
    async refresh(log) {
      const rows = await readQueue(log);
      const now = Date.now();
      // Set afresh each time: a kind or runner gone (a reload) takes its series with it.
      for (const g of [queued, running, oldest, progress, inFlight, capacity, available]) g.reset();
      // Without the store's answer the queue's series are absent (unknown), not 0.
      for (const kind of rows ? sources.kinds() : []) {
        for (const g of [queued, running, oldest, progress]) g.set({ kind }, 0);
      }
      for (const row of rows ?? []) {
        if (row.status === 'queued') {
          queued.set({ kind: row.kind }, row.jobs);
          oldest.set({ kind: row.kind }, Math.max(0, now - row.oldest_created_at) / 1000);
        } else {
          running.set({ kind: row.kind }, row.jobs);
          progress.set({ kind: row.kind }, row.progress);
        }
      }
      for (const runner of sources.runners()) {
        inFlight.set({ runner: runner.name }, runner.inFlight);
        capacity.set({ runner: runner.name }, runner.config.max_concurrency);
        available.set({ runner: runner.name }, runner.healthy ? 1 : 0);
      }
    },
  };
}
