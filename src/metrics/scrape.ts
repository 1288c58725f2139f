import { Gauge, Registry } from 'prom-client';
import type { Store } from '../store/index.js';

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
 * one app's store and runners, so each app has its own registry of them.
 */
export function scrapeGauges(sources: ScrapeSources): { refresh(): Promise<void>; registry: Registry } {
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

  return {
    registry,
    async refresh() {
      const rows = await sources.store.jobs.unfinishedByKind();
      const now = Date.now();
      // Set afresh each time: a kind or runner gone (a reload) takes its series with it.
      for (const g of [queued, running, oldest, progress, inFlight, capacity, available]) g.reset();
      for (const kind of sources.kinds()) {
        for (const g of [queued, running, oldest, progress]) g.set({ kind }, 0);
      }
      for (const row of rows) {
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
