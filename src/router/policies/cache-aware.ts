import type { Choice, Outcome, ReplicaView, RoutingPolicy, RoutingRequest } from '../policy.js';
import type { PrefixIndex } from '../prefix-index.js';
import { rendezvousScore } from './rendezvous.js';

export interface CacheAwareSettings {
  /** A replica with this many more requests in flight than the least busy candidate takes no new one. */
  balanceAbsThreshold: number;
  /** Shares what each choice puts in a replica's cache with the other gateway processes. */
  share?: (url: string, chain: readonly string[], capacityBlocks: number) => void;
}

/**
 * What a request in flight on a replica costs one more request there, in prompt tokens. Running
 * sequences slow every decode step and hold KV blocks; small next to a prefill, it breaks ties
 * toward the idler replica.
 */
const TOKENS_PER_REQUEST_IN_FLIGHT = 16;

/**
 * What one prompt token that is not cached costs, against one token of prefill already queued. A
 * miss costs its own prefill and also, on a replica whose cache is full, evicts prefixes other
 * requests will then miss — copying a prefix to a second replica halves what the fleet can cache
 * of it, and queues are deep but brief (a cold start queues every new prefix at once). So a
 * prefix leaves its replica only when that replica is queued far deeper than another (sixteen
 * prefills of the prompt), or past the balance bound. Measured in bench/routing: at weight 1 every
 * prefix was copied to three replicas of four and the hit rate halved; at 4, still 2.9 replicas.
 */
const MISS_WEIGHT = 16;

interface Memo {
  /** Ticks at which the matched blocks were last used before this request. */
  ticks: number[];
  predictedBlocks: number;
  /** The tick this request's blocks were recorded at, as the replica's. */
  touchedAt: number;
}

/**
 * Kiln's replica choice. Each candidate is scored by the time the request would wait for its first
 * token there, counted in prompt tokens: the tokens the replica would still have to prefill (the
 * prompt less what its cache holds) plus the prefill already queued on it plus a little per request
 * in flight. The cheapest wins; equal scores go to the prompt's rendezvous home, so gateways that
 * have never seen a prefix still agree where it goes. Load always wins past a bound: a replica with
 * `balanceAbsThreshold` more requests in flight than the least busy candidate is not a candidate,
 * so one hot prefix spreads over replicas instead of pinning one. A hot prefix whose replica is
 * queued deeper than a whole prefill elsewhere is copied there by the score itself.
 */
export class CacheAwarePolicy implements RoutingPolicy {
  readonly name = 'cache-aware';

  constructor(
    private readonly index: PrefixIndex,
    private readonly settings: CacheAwareSettings,
  ) {}

  #capacityBlocks(replica: ReplicaView, request: RoutingRequest): number {
    return Math.floor((replica.kvCapacityTokens * request.charsPerToken) / request.blockChars);
  }

  #cachedTokens(blocks: number, request: RoutingRequest): number {
    if (blocks === 0) return 0;
    // The engine always computes the prompt's last token, so at most all but one are cached.
    return Math.min(
      request.promptTokens - 1,
      Math.floor((blocks * request.blockChars) / request.charsPerToken),
    );
  }

  choose<R extends ReplicaView>(candidates: readonly R[], request: RoutingRequest): Choice<R> {
    let least = Number.POSITIVE_INFINITY;
    for (const replica of candidates) least = Math.min(least, replica.inFlight);
    const home = request.blocks[0] ?? request.scope + request.text;
    // Ranks are hashes, worked out only for a tie: most choices have none (one replica, or one cheapest).
    let best: { replica: R; cost: number; rank?: number; ticks: number[]; blocks: number } | undefined;
    for (const replica of candidates) {
      if (replica.inFlight >= least + this.settings.balanceAbsThreshold) continue;
      const model = this.index.replica(replica.url, this.#capacityBlocks(replica, request));
      const match = model.match(request.blocks);
      const load = Math.max(replica.inFlight, replica.engineLoad ?? 0);
      const cost =
        MISS_WEIGHT * (request.promptTokens - this.#cachedTokens(match.blocks, request)) +
        replica.pendingPrefillTokens +
        TOKENS_PER_REQUEST_IN_FLIGHT * load;
      if (best && cost === best.cost) {
        best.rank ??= rendezvousScore(home, best.replica.url);
        const rank = rendezvousScore(home, replica.url);
        if (rank > best.rank) best = { replica, cost, rank, ticks: match.ticks, blocks: match.blocks };
      } else if (!best || cost < best.cost) {
        best = { replica, cost, ticks: match.ticks, blocks: match.blocks };
      }
    }
    // The least busy candidate always passes the bound, so there is a best.
    const chosen = best as NonNullable<typeof best>;
    const capacity = this.#capacityBlocks(chosen.replica, request);
    const touchedAt = this.index.nextTick();
    this.index.replica(chosen.replica.url, capacity).touch(request.blocks, touchedAt);
    this.settings.share?.(chosen.replica.url, request.blocks, capacity);
    const memo: Memo = { ticks: chosen.ticks, predictedBlocks: chosen.blocks, touchedAt };
    return {
      replica: chosen.replica,
      predictedCachedTokens: this.#cachedTokens(chosen.blocks, request),
      memo,
    };
  }

  /**
   * The engine found fewer cached tokens than predicted: the first block it lacked was evicted, and
   * with it (its cache being LRU) everything used no later than that block was.
   */
  observe(replica: ReplicaView, request: RoutingRequest, choice: Choice, outcome: Outcome): void {
    const memo = choice.memo as Memo | undefined;
    if (!memo) return;
    const model = this.index.replica(replica.url, this.#capacityBlocks(replica, request));
    if (!outcome.ok && !outcome.prefilled) {
      // Refused, or unreachable, before any of the answer: the replica did not take the prompt in,
      // so the blocks it was predicted to gain are not there. (Other gateways heard of them; they
      // learn otherwise from the engine's cached-token counts, as for any eviction.)
      model.untouch(request.blocks.slice(memo.predictedBlocks), memo.touchedAt);
      return;
    }
    if (outcome.cachedTokens === undefined || memo.predictedBlocks === 0) return;
    // Blocks the engine found, with one block of slack: the engine's blocks are tokens, the index's
    // characters, and characters per token is an estimate.
    const foundBlocks = Math.min(
      memo.predictedBlocks,
      Math.floor((outcome.cachedTokens * request.charsPerToken) / request.blockChars) + 1,
    );
    if (foundBlocks >= memo.predictedBlocks) {
      model.missStreak = 0;
      return;
    }
    // A prefix used so recently that an LRU cache of this size must still hold it, found missing
    // entirely, twice in a row: the cache was emptied (a restart, a reset), not trimmed. Start again
    // from what the replica surely holds now: this prompt.
    const firstUse = memo.ticks[0];
    const recent = firstUse !== undefined && model.usedSince(firstUse) < model.capacityBlocks / 2;
    if (outcome.cachedTokens === 0 && recent && ++model.missStreak >= 2) {
      model.clear();
      model.missStreak = 0;
      model.touch(request.blocks, this.index.nextTick());
      return;
    }
    if (outcome.cachedTokens > 0) model.missStreak = 0;
    const evictedAt = memo.ticks[foundBlocks];
    if (evictedAt !== undefined) model.evictBefore(evictedAt);
  }

  forget(replica: ReplicaView): void {
    this.index.forget(replica.url);
  }
}
