/**
 * Process-wide routing counters for /metrics. They outlive a reload, as Prometheus counters must.
 */
const routed = new Map<string, number>();

export function countRoute(requestClass: string, engine: string, overflow: boolean): void {
  const key = `${requestClass}\u0000${engine}\u0000${overflow}`;
  routed.set(key, (routed.get(key) ?? 0) + 1);
}

/** Per replica: prompt tokens sent, cached tokens the router predicted, cached tokens the engine reported. */
const cached = new Map<string, { prompt: number; predicted: number; reported: number }>();

export function countCached(
  engine: string,
  replica: number,
  promptTokens: number,
  predicted: number,
  reported: number,
): void {
  const key = `engine="${engine}",replica="${replica}"`;
  const counts = cached.get(key) ?? { prompt: 0, predicted: 0, reported: 0 };
  counts.prompt += promptTokens;
  counts.predicted += predicted;
  counts.reported += reported;
  cached.set(key, counts);
}

/** `kiln_routed_requests_total{class, engine, overflow}` and the cache counters, in Prometheus text format. */
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
  const counter = (
    name: string,
    help: string,
    pick: (c: { prompt: number; predicted: number; reported: number }) => number,
  ) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
    for (const [labels, counts] of cached) lines.push(`${name}{${labels}} ${pick(counts)}`);
  };
  counter(
    'kiln_replica_prompt_tokens_total',
    'Prompt tokens of completed requests, as the engine counted them.',
    (c) => c.prompt,
  );
  counter(
    'kiln_replica_cached_tokens_predicted_total',
    'Prompt tokens the router expected the replica to find in its prefix cache.',
    (c) => c.predicted,
  );
  counter(
    'kiln_replica_cached_tokens_reported_total',
    'Prompt tokens the replica reported cached (usage.prompt_tokens_details.cached_tokens).',
    (c) => c.reported,
  );
  return lines.join('\n');
}

/** The same counters as data: per engine, requests routed (and how many as overflow); per replica, tokens. */
export function routeCounts(): {
  routed: Map<string, { requests: number; overflow: number }>;
  cached: Map<string, { prompt: number; predicted: number; reported: number }>;
} {
  const perEngine = new Map<string, { requests: number; overflow: number }>();
  for (const [key, value] of routed) {
    const [, engine = '', overflow] = key.split('\u0000');
    const counts = perEngine.get(engine) ?? { requests: 0, overflow: 0 };
    counts.requests += value;
    if (overflow === 'true') counts.overflow += value;
    perEngine.set(engine, counts);
  }
  const perReplica = new Map<string, { prompt: number; predicted: number; reported: number }>();
  for (const [labels, counts] of cached) {
    const [, engine, replica] = /engine="(.*)",replica="(\d+)"/.exec(labels) ?? [];
    perReplica.set(`${engine}/${replica}`, { ...counts });
  }
  return { routed: perEngine, cached: perReplica };
}
