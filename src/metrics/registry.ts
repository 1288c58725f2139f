import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { VERSION } from '../version.js';

/**
 * The process-wide registry of Kiln's own metrics (prom-client). Like the routing counters, they
 * outlive a reload and count for the whole process; GET /metrics renders them first.
 */
export const registry = new Registry();

new Gauge({
  name: 'kiln_build_info',
  help: 'Always 1; the running Kiln version as a label.',
  labelNames: ['version'],
  registers: [registry],
}).set({ version: VERSION }, 1);

let collectingProcessMetrics = false;

/**
 * CPU, memory, file descriptors, event-loop lag, heap and GC of this process, as `kiln_process_*`
 * and `kiln_nodejs_*`. Started by the first app that serves /metrics, once per process: it watches
 * the event loop and GC, which a CLI command or a worker without HTTP has no use for.
 */
export function collectProcessMetrics(): void {
  if (collectingProcessMetrics) return;
  collectingProcessMetrics = true;
  collectDefaultMetrics({ register: registry, prefix: 'kiln_' });
  // Gauges named like counters, which promtool rejects; each is the sum of its by-type gauge.
  for (const name of ['active_handles', 'active_requests', 'active_resources'])
    registry.removeSingleMetric(`kiln_nodejs_${name}_total`);
}
