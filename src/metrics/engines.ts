import { LeanCounter, LeanHistogram } from './lean.js';

const LABELS = ['engine', 'replica'] as const;

const firstToken = new LeanHistogram(
  'kiln_engine_time_to_first_token_seconds',
  'Time from sending a chat request to a replica to its first chunk (queue and prefill), by engine pool and replica.',
  LABELS,
  [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
);

const interToken = new LeanHistogram(
  'kiln_engine_inter_token_latency_seconds',
  'Mean time between output tokens of each completed chat request, by engine pool and replica.',
  LABELS,
  [0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1],
);

const errors = new LeanCounter(
  'kiln_engine_errors_total',
  'Chat requests a replica failed (unavailable, timeout, rejected, broken), by engine pool, replica and kind; a caller’s cancel is not counted.',
  [...LABELS, 'kind'],
);

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
    firstToken.observe((this.#firstAt - this.#sent) / 1000, this.#labels.engine, this.#labels.replica);
  }

  completed(outputTokens: number | undefined): void {
    if (this.#firstAt === undefined || outputTokens === undefined || outputTokens < 2) return;
    const perToken = (performance.now() - this.#firstAt) / 1000 / (outputTokens - 1);
    interToken.observe(perToken, this.#labels.engine, this.#labels.replica);
  }

  failed(kind: string): void {
    errors.inc(this.#labels.engine, this.#labels.replica, kind);
  }
}
