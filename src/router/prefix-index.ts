/**
 * What each replica's KV cache holds, as the router believes: the block keys of the prompts it sent
 * there, per replica, in least-recently-used order and bounded by the replica's capacity — the way
 * vLLM and SGLang evict. Corrected from what engines report, and shared between gateway processes.
 */

/** One replica's cache as the router models it. */
export class ReplicaCacheModel {
  /** Block key → the tick it was last used at; the Map's order is recency order, oldest first. */
  readonly #blocks = new Map<string, number>();
  capacityBlocks: number;
  /** Requests in a row that found none of a prefix the model said was there. */
  missStreak = 0;

  constructor(capacityBlocks: number) {
    this.capacityBlocks = Math.max(1, capacityBlocks);
  }

  get size(): number {
    return this.#blocks.size;
  }

  /** Blocks used after `tick`: how far down the LRU order a block last used then has sunk. */
  usedSince(tick: number): number {
    let count = 0;
    for (const used of this.#blocks.values()) if (used > tick) count++;
    return count;
  }

  has(key: string): boolean {
    return this.#blocks.has(key);
  }

  /** How many leading keys of `chain` are held, and the tick each was last used at. */
  match(chain: readonly string[]): { blocks: number; ticks: number[] } {
    const ticks: number[] = [];
    for (const key of chain) {
      const tick = this.#blocks.get(key);
      if (tick === undefined) break;
      ticks.push(tick);
    }
    return { blocks: ticks.length, ticks };
  }

  /**
   * The replica now holds every key of `chain` (it computed or reused them): most recently used.
   * Touched last block first, as engines free a sequence's blocks tail first: of one prompt, the
   * unique tail is evicted before the shared head.
   */
  touch(chain: readonly string[], tick: number): void {
    for (let i = chain.length - 1; i >= 0; i--) {
      const key = chain[i] as string;
      this.#blocks.delete(key);
      this.#blocks.set(key, tick);
    }
    for (const oldest of this.#blocks.keys()) {
      if (this.#blocks.size <= this.capacityBlocks) break;
      this.#blocks.delete(oldest);
    }
  }

  /**
   * The engine evicted a block last used at `tick`. Its cache is LRU, so everything used before
   * then is gone too: forget it. (Blocks used at that same moment — the rest of that prompt — may
   * well remain: engines evict a prompt's tail before its head.)
   */
  evictBefore(tick: number): void {
    for (const [key, used] of this.#blocks) {
      if (used >= tick) break;
      this.#blocks.delete(key);
    }
  }

  /** Forgets the keys of `chain` last used at `tick`, and no later: a touch that did not happen. */
  untouch(chain: readonly string[], tick: number): void {
    for (const key of chain) if (this.#blocks.get(key) === tick) this.#blocks.delete(key);
  }

  clear(): void {
    this.#blocks.clear();
  }
}

/** The cache models of every replica, by replica URL, and the clock that orders their uses. */
export class PrefixIndex {
  readonly #replicas = new Map<string, ReplicaCacheModel>();
  #tick = 0;

  nextTick(): number {
    return ++this.#tick;
  }

  /** The model of the replica at `url`, sized to `capacityBlocks` (capacity can change with calibration). */
  replica(url: string, capacityBlocks: number): ReplicaCacheModel {
    let model = this.#replicas.get(url);
    if (!model) {
      model = new ReplicaCacheModel(capacityBlocks);
      this.#replicas.set(url, model);
    } else model.capacityBlocks = Math.max(1, capacityBlocks);
    return model;
  }

  /** Whether any replica is believed to hold the block. */
  anyHolds(key: string): boolean {
    for (const model of this.#replicas.values()) if (model.has(key)) return true;
    return false;
  }

  /** The replica's cache is known to be empty (it restarted, or came back from being down). */
  forget(url: string): void {
    this.#replicas.get(url)?.clear();
  }
}
