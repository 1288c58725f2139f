/**
 * Process-wide routing counters for /metrics. They outlive a reload, as Prometheus counters must.
 */
const routed = new Map<string, number>();

export function countRoute(requestClass: string, engine: string, overflow: boolean): void {
  const key = `${requestClass}\u0000${engine}\u0000${overflow}`;
  routed.set(key, (routed.get(key) ?? 0) + 1);
}

/** `kiln_routed_requests_total{class, engine, overflow}` in Prometheus text format. */
export function routeMetrics(): string {
  const lines = [
    '# HELP kiln_routed_requests_total Chat requests handed to an engine, by request class, engine and overflow.',
    '# TYPE kiln_routed_requests_total counter',
  ];
  for (const [key, value] of routed) {
    const [requestClass, engine, overflow] = key.split('\u0000');
    lines.push(
      `kiln_routed_requests_total{class="${requestClass}",engine="${engine}",overflow="${overflow}"} ${value}`,
    );
  }
  return lines.join('\n');
}
