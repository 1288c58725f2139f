import { Counter, Histogram } from 'prom-client';
import { childOf, registry } from './registry.js';

const LABELS = ['engine', 'replica'] as const;

const firstToken = new Histogram({
  name: 'kiln_engine_time_to_first_token_seconds',
  help: 'Time from sending a chat request to a replica to its first chunk (queue and prefill), by engine pool and replica.',
  labelNames: LABELS,
  buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [registry],
});

const interToken = new Histogram({
  name: 'kiln_engine_inter_token_latency_seconds',
  help: 'Mean time between output tokens of each completed chat request, by engine pool and replica.',
  labelNames: LABELS,
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1],
  registers: [registry],
});

const errors = new Counter({
  name: 'kiln_engine_errors_total',
  help: 'Chat requests a replica failed (unavailable, timeout, rejected, broken), by engine pool, replica and kind; a caller’s cancel is not counted.',
  labelNames: [...LABELS, 'kind'],
  registers: [registry],
});

const firstTokenChildren = new Map<string, ReturnType<typeof firstToken.labels>>();
const interTokenChildren = new Map<string, ReturnType<typeof interToken.labels>>();

/**
 * Times one chat call on one replica: `firstChunk` when its first chunk arrives, then `completed`
 * with the output tokens the engine reported, or `failed`. Two clock reads and at most two
 * observations per request, none per token.
 */
export class EngineCallTimer {
  readonly #labels: { engine: string; replica: string };
  readonly #sent = performance.now();
  #firstAt: number | undefined;

  constructor(engine: string, replica: number) {
    this.#labels = { engine, replica: String(replica) };
  }

  firstChunk(): void {
    this.#firstAt = performance.now();
    const { engine, replica } = this.#labels;
    childOf(firstTokenChildren, firstToken, engine, replica).observe((this.#firstAt - this.#sent) / 1000);
  }

  completed(outputTokens: number | undefined): void {
    if (this.#firstAt === undefined || outputTokens === undefined || outputTokens < 2) return;
    const { engine, replica } = this.#labels;
    childOf(interTokenChildren, interToken, engine, replica).observe(
      (performance.now() - this.#firstAt) / 1000 / (outputTokens - 1),
    );
  }

  failed(kind: string): void {
    errors.inc({ ...this.#labels, kind });
  }
}
