import { createHash } from 'node:crypto';
import type { ChatMessage } from '../engines/types.js';

export type RequestClass = 'shared-prefix' | 'unique' | 'long-context';

const text = (content: unknown): string =>
  typeof content === 'string'
    ? content
    : Array.isArray(content)
      ? content.map((part) => (typeof part?.text === 'string' ? part.text : '')).join('')
      : '';

/** A cheap prompt-size estimate, about four characters a token, as engines' tokenisers average out. */
export function estimateTokens(messages: readonly ChatMessage[]): number {
  let chars = 0;
  for (const message of messages) chars += text(message.content).length + 8;
  return Math.ceil(chars / 4);
}

/**
 * Remembers the leading blocks of recent prompts (system prompt, preambles, earlier turns), so a
 * request whose prefix was seen before from another request can go where that prefix is cached.
 * Bounded: the oldest blocks are forgotten first.
 */
export class PrefixTracker {
  readonly #seen = new Map<string, number>();

  constructor(
    private readonly blockChars: number,
    private readonly capacity = 50_000,
  ) {}

  /** The hash chain of the prefix's whole blocks; the last message (the new turn) is not part of it. */
  #blocks(messages: readonly ChatMessage[]): string[] {
    const prefix = messages
      .slice(0, -1)
      .map((m) => `${m.role}\u0000${text(m.content)}\u0001`)
      .join('');
    const hashes: string[] = [];
    let previous = '';
    for (let at = 0; at + this.blockChars <= prefix.length; at += this.blockChars) {
      previous = createHash('sha1')
        .update(previous)
        .update(prefix.slice(at, at + this.blockChars))
        .digest('base64');
      hashes.push(previous);
    }
    return hashes;
  }

  /** True when the first block of this prompt's prefix was seen before; records its blocks either way. */
  observe(messages: readonly ChatMessage[]): boolean {
    const blocks = this.#blocks(messages);
    const shared = blocks.length > 0 && this.#seen.has(blocks[0] as string);
    const now = Date.now();
    for (const block of blocks) {
      this.#seen.delete(block);
      this.#seen.set(block, now);
    }
    while (this.#seen.size > this.capacity) this.#seen.delete(this.#seen.keys().next().value as string);
    return shared;
  }
}

/** The request class (spec section 1.3), from its size, its prefix and its persona. */
export function classify(
  messages: readonly ChatMessage[],
  options: { longContextTokens: number; sharedPreamble: boolean; prefixes: PrefixTracker },
): RequestClass {
  const seenPrefix = options.prefixes.observe(messages);
  if (estimateTokens(messages) > options.longContextTokens) return 'long-context';
  return seenPrefix || options.sharedPreamble ? 'shared-prefix' : 'unique';
}
