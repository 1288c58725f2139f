import { PrefillLane, SequenceSlots } from './batching.js';
import { blockHashes, PrefixCache } from './prefix-cache.js';

/**
 * The inference engine's model: sequence slots, one prefill lane shared by the running sequences,
 * the prefix cache, and the time prefill and decode take.
 */
export interface EngineSettings {
  maxSequences: number;
  kvBlocks: number;
  blockTokens: number;
  prefillMsPerToken: number;
  decodeMsPerToken: number;
}

export interface SimStats {
  /** Chat completions accepted (valid, for the served model), finished or not. */
  requests: number;
  /** Requests holding a sequence slot: queued for the prefill lane, prefilling or decoding. */
  running: number;
  /** Requests queued for a sequence slot. */
  waiting: number;
  /** Running requests queued for the prefill lane (the one prefilling not counted). */
  prefillWaiting: number;
  /** Prompt KV blocks found in the prefix cache. */
  prefixHits: number;
  /** Full prompt KV blocks that had to be computed. */
  prefixMisses: number;
  /** Prompt tokens looked up in the prefix cache when their prefill started (vLLM's queries). */
  prefixQueryTokens: number;
  /** Prompt tokens the prefix cache supplied: the sum of usage's cached_tokens (vLLM's hits). */
  prefixHitTokens: number;
  /** KV blocks held in the prefix cache now. */
  cachedBlocks: number;
  /** Prompt tokens of requests admitted to a slot, cached ones included. */
  promptTokens: number;
  generationTokens: number;
}

export interface Sequence {
  prompt: string;
  promptTokens: number;
  /** How many tokens to decode; the time decoding takes follows this. */
  outputTokens: number;
}

/**
 * Called as output tokens fall due, with the range [from, to) of token indexes now produced; the
 * first call comes at the end of prefill, which produces token 0.
 */
export type TokenSink = (from: number, to: number) => void;

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', abort);
      resolve(true);
    }, ms);
    const abort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener('abort', abort, { once: true });
  });
}

export class LlmEngine {
  private readonly slots: SequenceSlots;
  private readonly lane = new PrefillLane();
  private readonly cache: PrefixCache;
  /** One controller per sequence in the engine, so that `stop()` can end them all. */
  private readonly live = new Set<AbortController>();
  private stopped = false;
  private readonly counters = {
    requests: 0,
    prefixHits: 0,
    prefixMisses: 0,
    prefixQueryTokens: 0,
    prefixHitTokens: 0,
    promptTokens: 0,
    generationTokens: 0,
  };

  constructor(private readonly settings: EngineSettings) {
    this.slots = new SequenceSlots(settings.maxSequences);
    this.cache = new PrefixCache(settings.kvBlocks);
  }

  stats(): SimStats {
    return {
      ...this.counters,
      running: this.slots.running,
      waiting: this.slots.waiting,
      prefillWaiting: this.lane.waiting,
      cachedBlocks: this.cache.size,
    };
  }

  /** Empties the prefix cache; prefills under way still add their blocks when they end. */
  resetPrefixCache(): void {
    this.cache.clear();
  }

  /** Ends every queued and running sequence (their `run` resolves undefined). */
  stop(): void {
    this.stopped = true;
    for (const controller of this.live) controller.abort();
  }

  /**
   * Queues the sequence for a slot, then for the prefill lane; prefills what the prefix cache lacks
   * (looked up as the prefill starts, so blocks a prefill just ahead computed count), then decodes
   * one token every decodeMsPerToken, calling `sink` as tokens fall due (without a sink the whole
   * decode is one wait). Resolves with the prompt tokens the cache supplied, or undefined if
   * `signal` (the client went away) or `stop()` ended it first.
   */
  async run(sequence: Sequence, signal: AbortSignal, sink?: TokenSink): Promise<number | undefined> {
    if (this.stopped || signal.aborted) return undefined;
    const controller = new AbortController();
    const cancel = () => controller.abort();
    signal.addEventListener('abort', cancel, { once: true });
    this.live.add(controller);
    try {
      return await this.runSequence(sequence, controller.signal, sink);
    } finally {
      signal.removeEventListener('abort', cancel);
      this.live.delete(controller);
    }
  }

  private async runSequence(
    sequence: Sequence,
    cancelled: AbortSignal,
    sink?: TokenSink,
  ): Promise<number | undefined> {
    this.counters.requests++;
    if (!(await this.slots.acquire(cancelled))) return undefined;
    try {
      this.counters.promptTokens += sequence.promptTokens;
      const prefill = await this.prefill(sequence, cancelled);
      if (!prefill) return undefined;
      return (await this.decode(sequence.outputTokens, prefill.end, cancelled, sink))
        ? prefill.cachedTokens
        : undefined;
    } finally {
      this.slots.release();
    }
  }

  /** Takes the prefill lane in turn; undefined if cancelled first. */
  private async prefill(
    sequence: Sequence,
    cancelled: AbortSignal,
  ): Promise<{ cachedTokens: number; end: number } | undefined> {
    const { blockTokens, prefillMsPerToken } = this.settings;
    const blocks = blockHashes(sequence.prompt, blockTokens);
    const start = await this.lane.enter(cancelled);
    if (start === undefined) return undefined;
    let end = start;
    try {
      // As in vLLM, the last prompt token is always computed (its logits give the first output
      // token), so a fully cached prompt still leaves its last block to recompute.
      const matchable = Math.floor((sequence.promptTokens - 1) / blockTokens);
      const hits = this.cache.match(blocks.slice(0, matchable));
      const cachedTokens = hits * blockTokens;
      this.counters.prefixHits += hits;
      this.counters.prefixMisses += blocks.length - hits;
      this.counters.prefixQueryTokens += sequence.promptTokens;
      this.counters.prefixHitTokens += cachedTokens;

      end = start + (sequence.promptTokens - cachedTokens) * prefillMsPerToken;
      if (!(await sleep(end - performance.now(), cancelled))) return undefined;
      this.cache.insert(blocks);
      return { cachedTokens, end };
    } finally {
      this.lane.leave(end);
    }
  }

  /**
   * Decodes `total` tokens, the first due at `start` (the end of prefill) and one more every
   * decodeMsPerToken, whatever else runs (decode is memory-bound); false if cancelled first.
   */
  private async decode(
    total: number,
    start: number,
    cancelled: AbortSignal,
    sink?: TokenSink,
  ): Promise<boolean> {
    const { decodeMsPerToken } = this.settings;
    if (!sink) {
      if (!(await sleep(start + (total - 1) * decodeMsPerToken - performance.now(), cancelled))) return false;
      this.counters.generationTokens += total;
      return true;
    }
    // Token i is due decodeMsPerToken × i after prefill; each wake sends every token now due, so
    // timer granularity never stretches the schedule.
    let sent = 0;
    while (sent < total) {
      const elapsed = Math.max(0, performance.now() - start);
      const due = decodeMsPerToken > 0 ? Math.min(total, Math.floor(elapsed / decodeMsPerToken) + 1) : total;
      if (due > sent) {
        this.counters.generationTokens += due - sent;
        sink(sent, due);
        sent = due;
      }
      if (sent < total && !(await sleep(start + sent * decodeMsPerToken - performance.now(), cancelled))) {
        return false;
      }
      if (cancelled.aborted) return false;
    }
    return true;
  }
}
