import { PrefillLane, SequenceSlots } from './batching.js';
import type { SlotView } from './flavor.js';
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
  /** Output tokens generated, every choice's, as they fall due (whether or not anyone reads them). */
  generationTokens: number;
  /** Prefill time spent, modelled: uncached prompt tokens × prefillMsPerToken, summed. */
  prefillMs: number;
  /** Decode steps taken, summed over requests (a step decodes one token of each of its choices). */
  decodeSteps: number;
  /** The longest sequence seen: prompt plus output tokens. */
  longestSequence: number;
}

export interface Sequence {
  prompt: string;
  promptTokens: number;
  /**
   * Output tokens of each choice (n > 1 decodes the choices side by side from one prefill);
   * decoding lasts as long as the longest.
   */
  outputTokens: readonly number[];
  /** Whether its client streams (shown in the slot view, as llama.cpp's /slots does). */
  stream?: boolean;
  /** vLLM's `cache_salt`: it keys the first block, so no other salt's blocks match. */
  cacheSalt?: string;
}

/**
 * Called as output tokens fall due, with the range [from, to) of token positions now produced (of
 * every choice still running) and the prompt tokens the cache supplied; the first call comes at
 * the end of prefill, which produces token 0.
 */
export type TokenSink = (from: number, to: number, cachedTokens: number) => void;

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

/** Tokens of positions [from, to) over choices of the given lengths. */
const tokensIn = (lengths: readonly number[], from: number, to: number) =>
  lengths.reduce((sum, length) => sum + Math.max(0, Math.min(to, length) - from), 0);

export class LlmEngine {
  private readonly slots: SequenceSlots;
  private readonly lane = new PrefillLane();
  private readonly cache: PrefixCache;
  /** One controller per sequence in the engine, so that `stop()` can end them all. */
  private readonly live = new Set<AbortController>();
  /** Each slot's latest task, for llama.cpp's /slots; a slot is taken lowest id first. */
  private readonly slotStates: SlotView[];
  private nextTask = 0;
  private stopped = false;
  private readonly counters = {
    requests: 0,
    prefixHits: 0,
    prefixMisses: 0,
    prefixQueryTokens: 0,
    prefixHitTokens: 0,
    promptTokens: 0,
    generationTokens: 0,
    prefillMs: 0,
    decodeSteps: 0,
    longestSequence: 0,
  };

  constructor(private readonly settings: EngineSettings) {
    this.slots = new SequenceSlots(settings.maxSequences);
    this.cache = new PrefixCache(settings.kvBlocks);
    this.slotStates = Array.from({ length: settings.maxSequences }, (_, id) => ({
      id,
      processing: false,
      taskId: -1,
      promptTokens: 0,
      promptProcessed: 0,
      promptCached: 0,
      decoded: 0,
      outputTokens: 0,
      stream: false,
    }));
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

  /** Every sequence slot: what it runs, or ran last. */
  slotViews(): SlotView[] {
    return this.slotStates.map((slot) => ({ ...slot, decoded: slot.processing ? slot.decoded : 0 }));
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
   * one token of each choice every decodeMsPerToken, calling `sink` as tokens fall due. Resolves
   * with the prompt tokens the cache supplied, or undefined if `signal` (the client went away, for
   * a request whose engine notices) or `stop()` ended it first.
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
    const slot = this.slotStates.find((s) => !s.processing) as SlotView;
    const longest = Math.max(0, ...sequence.outputTokens);
    Object.assign(slot, {
      processing: true,
      taskId: this.nextTask++,
      promptTokens: sequence.promptTokens,
      promptProcessed: 0,
      promptCached: 0,
      decoded: 0,
      outputTokens: longest,
      stream: sequence.stream === true,
    });
    this.counters.longestSequence = Math.max(this.counters.longestSequence, sequence.promptTokens + longest);
    try {
      this.counters.promptTokens += sequence.promptTokens;
      const prefill = await this.prefill(sequence, cancelled);
      if (!prefill) return undefined;
      slot.promptCached = prefill.cachedTokens;
      slot.promptProcessed = sequence.promptTokens - prefill.cachedTokens;
      const decoded = await this.decode(sequence.outputTokens, prefill, cancelled, slot, sink);
      return decoded ? prefill.cachedTokens : undefined;
    } finally {
      slot.processing = false;
      this.slots.release();
    }
  }

  /** Takes the prefill lane in turn; undefined if cancelled first. */
  private async prefill(
    sequence: Sequence,
    cancelled: AbortSignal,
  ): Promise<{ cachedTokens: number; end: number } | undefined> {
    const { blockTokens, prefillMsPerToken } = this.settings;
    const blocks = blockHashes(sequence.prompt, blockTokens, sequence.cacheSalt);
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

      const ms = (sequence.promptTokens - cachedTokens) * prefillMsPerToken;
      end = start + ms;
      if (!(await sleep(end - performance.now(), cancelled))) return undefined;
      this.counters.prefillMs += ms;
      this.cache.insert(blocks);
      return { cachedTokens, end };
    } finally {
      this.lane.leave(end);
    }
  }

  /**
   * Decodes the choices side by side, token position i due decodeMsPerToken × i after the end of
   * prefill, whatever else runs (decode is memory-bound); false if cancelled first. Tokens are
   * counted as they fall due, read or not, so a request nobody waits for still shows its work.
   */
  private async decode(
    lengths: readonly number[],
    prefill: { cachedTokens: number; end: number },
    cancelled: AbortSignal,
    slot: SlotView,
    sink?: TokenSink,
  ): Promise<boolean> {
    const { decodeMsPerToken } = this.settings;
    const start = prefill.end;
    const total = Math.max(0, ...lengths);
    // Each wake produces every position now due, so timer granularity never stretches the schedule.
    let sent = 0;
    while (sent < total) {
      const elapsed = Math.max(0, performance.now() - start);
      const due = decodeMsPerToken > 0 ? Math.min(total, Math.floor(elapsed / decodeMsPerToken) + 1) : total;
      if (due > sent) {
        this.counters.generationTokens += tokensIn(lengths, sent, due);
        this.counters.decodeSteps += due - sent;
        slot.decoded = due;
        sink?.(sent, due, prefill.cachedTokens);
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
