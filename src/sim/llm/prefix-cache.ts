import { createHash } from 'node:crypto';
import { tokenEnd } from './text.js';

/**
 * The identities of the prompt's full KV blocks, as vLLM's automatic prefix caching computes
 * them: block i holds tokens [i × blockTokens, (i + 1) × blockTokens) of the prompt, and its hash
 * covers those tokens' text and the hash of block i − 1, so a block can only be reused when
 * everything before it matches too. A trailing partial block has no identity. A `cache_salt`
 * goes into the first block's hash, as vLLM's does, so prompts of different salts share no block.
 */
export function blockHashes(prompt: string, blockTokens: number, salt = ''): string[] {
  const hashes: string[] = [];
  let previous = salt === '' ? '' : createHash('sha256').update('salt\u0000').update(salt).digest('base64');
  let blockStart = 0;
  let tokens = 0;
  for (let at = 0; at < prompt.length; ) {
    at = tokenEnd(prompt, at);
    if (++tokens < blockTokens) continue;
    previous = createHash('sha256').update(previous).update(prompt.slice(blockStart, at)).digest('base64');
    hashes.push(previous);
    blockStart = at;
    tokens = 0;
  }
  return hashes;
}

/** A KV prefix cache of `capacity` blocks with least-recently-used eviction. */
export class PrefixCache {
  /** Insertion order is recency order: a touched block is deleted and set again. */
  private readonly blocks = new Set<string>();

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.blocks.size;
  }

  /** How many of the leading `hashes` are cached; those are touched (most recently used). */
  match(hashes: readonly string[]): number {
    let hits = 0;
    for (const hash of hashes) {
      if (!this.blocks.has(hash)) break;
      this.blocks.delete(hash);
      this.blocks.add(hash);
      hits++;
    }
    return hits;
  }

  /**
   * Caches (or touches) every block, evicting the least recently used beyond capacity. Touched
   * last block first, as vLLM frees a finished sequence's blocks in reverse order: among one
   * prompt's blocks the tail is evicted first and the shared head stays longest.
   */
  insert(hashes: readonly string[]): void {
    if (this.capacity <= 0) return;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as string;
      this.blocks.delete(hash);
      this.blocks.add(hash);
    }
    for (const oldest of this.blocks) {
      if (this.blocks.size <= this.capacity) break;
      this.blocks.delete(oldest);
    }
  }

  /** Forgets every block, as vLLM's /reset_prefix_cache does. */
  clear(): void {
    this.blocks.clear();
  }
}
