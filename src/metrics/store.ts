/**
 * Store latency, by operation. Every statement passes through here, so this is not a prom-client
 * Histogram: its observe (label validation and hashing, ~350 ns) would add a quarter to a point
 * query on SQLite (~1.4 µs). Fixed buckets in a typed array bring the whole timing, both clock
 * readings included, to ~100 ns; the text is written at scrape time in the same format.
 */

/** What the store was asked to do: `all`, `get` and `run` are the SqlExecutor's statement methods. */
export type StoreOperation = 'all' | 'get' | 'run' | 'transaction';

const NAME = 'kiln_store_query_duration_seconds';
const OPERATIONS: readonly StoreOperation[] = ['all', 'get', 'run', 'transaction'];
const BOUNDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];

interface Buckets {
  /** Per bucket, not cumulative; the last one is +Inf. */
  counts: Float64Array;
  sum: number;
}

const latency = Object.fromEntries(
  OPERATIONS.map((operation) => [operation, { counts: new Float64Array(BOUNDS.length + 1), sum: 0 }]),
) as Record<StoreOperation, Buckets>;

/** Records one operation that began at `startedMs` (a `performance.now()` reading) and has just ended. */
export function observeStoreQuery(operation: StoreOperation, startedMs: number): void {
  const seconds = (performance.now() - startedMs) / 1000;
  const buckets = latency[operation];
  buckets.sum += seconds;
  let i = 0;
  while (i < BOUNDS.length && seconds > (BOUNDS[i] as number)) i++;
  buckets.counts[i] = (buckets.counts[i] ?? 0) + 1;
}

/** Runs a synchronous statement (SQLite's) and records how long it took, failed or not. */
export function timeStoreQuery<T>(operation: StoreOperation, statement: () => T): T {
  const started = performance.now();
  try {
    return statement();
  } finally {
    observeStoreQuery(operation, started);
  }
}

/** Awaits an operation (a PostgreSQL round trip, a transaction) and records how long it took, failed or not. */
export async function timeStoreOperation<T>(operation: StoreOperation, work: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await work();
  } finally {
    observeStoreQuery(operation, started);
  }
}

/** `kiln_store_query_duration_seconds` in Prometheus text format. */
export function storeLatencyMetrics(): string {
  const lines = [
    `# HELP ${NAME} Time the store took, by operation: all, get and run are statements (rows, one row, a change count), transaction is a whole transaction as its caller waited for it, group commit included.`,
    `# TYPE ${NAME} histogram`,
  ];
  for (const operation of OPERATIONS) {
    const { counts, sum } = latency[operation];
    let cumulative = 0;
    BOUNDS.forEach((bound, i) => {
      cumulative += counts[i] ?? 0;
      lines.push(`${NAME}_bucket{operation="${operation}",le="${bound}"} ${cumulative}`);
    });
    cumulative += counts[BOUNDS.length] ?? 0;
    lines.push(
      `${NAME}_bucket{operation="${operation}",le="+Inf"} ${cumulative}`,
      `${NAME}_sum{operation="${operation}"} ${sum}`,
      `${NAME}_count{operation="${operation}"} ${cumulative}`,
    );
  }
  return lines.join('\n');
}
