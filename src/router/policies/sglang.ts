/**
 * SGLang's router `cache_aware` policy, re-implemented from sgl-model-gateway
 * (`src/policies/cache_aware.rs` and `tree.rs`, as last released from sgl-project/sglang) so that
 * Kiln's benchmark can run it beside Kiln's own policy.
 *
 * Per request:
 * 1. Load is the router's own in-flight count per worker. When the load is imbalanced — the
 *    spread exceeds `balanceAbsThreshold` AND the busiest exceeds `balanceRelThreshold` times the
 *    idlest — the least-loaded worker takes it (shortest queue), whatever the cache.
 * 2. Otherwise the prompt is matched against the shared approximate radix tree. Above
 *    `cacheThreshold` (matched characters / prompt characters) the worker holding the longest
 *    match takes it; at or below, the least-loaded worker does (SGLang since PR #14650; before
 *    that, and still in its doc comment, the worker with the smallest tree: `onCacheMiss`).
 * 3. Either way the chosen worker is recorded in the tree as holding the prompt.
 * Every `evictionIntervalMs` each worker's tree is trimmed to `maxTreeSize` characters, least
 * recently used leaves first. The policy never learns from outcomes, as SGLang's does not.
 */

import { KilnError } from '../../errors.js';
import type { Choice, ReplicaView, RoutingPolicy, RoutingRequest } from '../policy.js';
import { ApproximateRadixTree } from './radix-tree.js';

export interface SglangCacheAwareSettings {
  /** Match rate (0–1) above which the best-matching worker is chosen. SGLang default 0.3. */
  cacheThreshold?: number;
  /** In-flight spread above which the load may count as imbalanced. SGLang default 64. */
  balanceAbsThreshold?: number;
  /** Busiest/idlest ratio above which the load may count as imbalanced. SGLang default 1.5. */
  balanceRelThreshold?: number;
  /** Characters each worker's tree keeps at an eviction. SGLang default 2^26. */
  maxTreeSize?: number;
  /** Time between evictions; 0 turns eviction off. SGLang default 60 s (`launch_router`). */
  evictionIntervalMs?: number;
  /**
   * Where a request with no good match goes: `leastLoaded` (SGLang's current code) or
   * `smallestTree`, the worker whose tree holds the fewest characters (SGLang before PR #14650).
   */
  onCacheMiss?: 'leastLoaded' | 'smallestTree';
  /** Milliseconds clock for the eviction schedule; `Date.now` unless a test drives it. */
  now?: () => number;
}

/** The first of the least-loaded candidates, as Rust's `min_by_key` keeps the first minimum. */
function leastLoaded<R extends ReplicaView>(candidates: readonly R[]): R {
  let best = candidates[0] as R;
  for (const replica of candidates) if (replica.inFlight < best.inFlight) best = replica;
  return best;
}

export class SglangCacheAware implements RoutingPolicy {
  readonly name = 'sglang';
  readonly #settings: Readonly<Required<SglangCacheAwareSettings>>;
  readonly #tree = new ApproximateRadixTree();
  #lastEviction: number;

  constructor(settings: SglangCacheAwareSettings = {}) {
    this.#settings = Object.freeze({
      cacheThreshold: settings.cacheThreshold ?? 0.3,
      balanceAbsThreshold: settings.balanceAbsThreshold ?? 64,
      balanceRelThreshold: settings.balanceRelThreshold ?? 1.5,
      maxTreeSize: settings.maxTreeSize ?? 2 ** 26,
      evictionIntervalMs: settings.evictionIntervalMs ?? 60_000,
      onCacheMiss: settings.onCacheMiss ?? 'leastLoaded',
      now: settings.now ?? Date.now,
    });
    this.#lastEviction = this.#settings.now();
  }

  choose<R extends ReplicaView>(candidates: readonly R[], request: RoutingRequest): Choice<R> {
    if (candidates.length === 0) throw new KilnError('internal-error', 'sglang policy: no candidates');
    const settings = this.#settings;
    this.#evictWhenDue();

    let min = Number.POSITIVE_INFINITY;
    let max = 0;
    for (const { inFlight } of candidates) {
      min = Math.min(min, inFlight);
      max = Math.max(max, inFlight);
    }
    const imbalanced = max - min > settings.balanceAbsThreshold && max > min * settings.balanceRelThreshold;
    if (imbalanced) {
      const replica = leastLoaded(candidates);
      this.#tree.insert(request.scope + request.text, replica.url);
      return { replica, predictedCachedTokens: 0 };
    }

    // One organisation's prompts never match another's: the scope leads the text.
    const text = request.scope + request.text;
    const match = this.#tree.prefixMatch(text, new Set(candidates.map((replica) => replica.url)));
    const matchRate = text.length === 0 ? 0 : match.matchedChars / text.length;
    let replica: R | undefined;
    if (matchRate > settings.cacheThreshold) {
      replica = candidates.find((candidate) => candidate.url === match.tenant);
    }
    replica ??=
      settings.onCacheMiss === 'smallestTree' ? this.#smallestTree(candidates) : leastLoaded(candidates);

    // Whoever holds the deepest matched node holds the whole matched prefix.
    const cachedChars = match.holders.has(replica.url) ? match.matchedChars : 0;
    const predictedCachedTokens =
      request.charsPerToken > 0 ? Math.floor(cachedChars / request.charsPerToken) : 0;
    this.#tree.insert(text, replica.url);
    return { replica, predictedCachedTokens };
  }

  forget(replica: ReplicaView): void {
    this.#tree.removeTenant(replica.url);
  }

  /** Characters the tree holds for the replica: SGLang's picture of its cache. */
  treeChars(replica: ReplicaView): number {
    return this.#tree.tenantChars(replica.url);
  }

  /** The candidate with the fewest characters in the tree (a new worker has none); the first on ties. */
  #smallestTree<R extends ReplicaView>(candidates: readonly R[]): R {
    let best = candidates[0] as R;
    let bestChars = this.#tree.tenantChars(best.url);
    for (const replica of candidates) {
      const chars = this.#tree.tenantChars(replica.url);
      if (chars < bestChars) {
        best = replica;
        bestChars = chars;
      }
    }
    return best;
  }

  /** SGLang evicts from a background thread; here the first request after the interval does it. */
  #evictWhenDue(): void {
    const { evictionIntervalMs, maxTreeSize, now } = this.#settings;
    if (evictionIntervalMs <= 0) return;
    const at = now();
    if (at - this.#lastEviction < evictionIntervalMs) return;
    this.#lastEviction = at;
    this.#tree.evictToSize(maxTreeSize);
  }
}
