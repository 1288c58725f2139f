import { createHash } from 'node:crypto';

/**
 * The simulator's stand-in for a tokenizer: every CHARS_PER_TOKEN UTF-16 code units of text are
 * one token (real BPE tokenizers average about four characters per token on English). Cheap,
 * deterministic, and good enough for usage arithmetic and prefix-cache blocks.
 */
export const CHARS_PER_TOKEN = 4;

export interface ChatMessage {
  role: string;
  content: string;
}

export const countTokens = (text: string): number => Math.ceil(text.length / CHARS_PER_TOKEN);

/**
 * A chat template in the spirit of Llama 3's: each message as `<|role|>content\n`, then the
 * assistant's turn opened (add_generation_prompt). Shared leading messages render to shared
 * leading text, which is what a prefix cache needs.
 */
export function renderChatPrompt(messages: readonly ChatMessage[]): string {
  let prompt = '';
  for (const message of messages) prompt += `<|${message.role}|>${message.content}\n`;
  return `${prompt}<|assistant|>`;
}

/** Short words, so that generated text re-tokenises to roughly the tokens it was generated as. */
const VOCABULARY = (
  'the a of to and in is it that for on with as was at by this from or an are be we can one ' +
  'all new more time way use data fire clay kiln heat glaze form shape cool slow fast warm ' +
  'pot bowl cup wheel hand stone ash salt iron blue red gold white then when each day run ' +
  'load test'
).split(' ');

/** sfc32: a small, fast PRNG with a 128-bit state, seeded from a hash so that any key works. */
function seededRandom(key: string): () => number {
  const seed = createHash('sha256').update(key).digest();
  let a = seed.readUInt32LE(0);
  let b = seed.readUInt32LE(4);
  let c = seed.readUInt32LE(8);
  let d = seed.readUInt32LE(12);
  return () => {
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
}

/**
 * `count` output tokens, each a piece of text, determined by `key` alone (the model, the prompt
 * and the seed): the same request always gets the same answer. Words are separated by spaces and
 * now and then end a sentence.
 */
export function generateTokens(key: string, count: number): string[] {
  const random = seededRandom(key);
  const tokens: string[] = new Array(count);
  let sentenceStart = true;
  for (let i = 0; i < count; i++) {
    let word = VOCABULARY[Math.floor(random() * VOCABULARY.length)] ?? 'the';
    if (sentenceStart) word = word[0]?.toUpperCase() + word.slice(1);
    sentenceStart = random() < 0.1;
    tokens[i] = (i === 0 ? '' : ' ') + word + (sentenceStart ? '.' : '');
  }
  return tokens;
}

export interface StoppedOutput {
  /** The tokens to send; the last one may be cut short where a stop string begins. */
  tokens: string[];
  /** Tokens generated, the one that completed the stop string included (what usage counts). */
  generated: number;
  finishReason: 'length' | 'stop';
}

/**
 * Applies `stop` strings the way vLLM does: generation ends at the first token that completes a
 * stop string, and the answer ends just before the stop string, which is not included.
 */
export function applyStop(tokens: readonly string[], stop: readonly string[]): StoppedOutput {
  if (stop.length > 0) {
    const text = tokens.join('');
    let cut = -1;
    let stopEnd = -1;
    for (const s of stop) {
      const at = text.indexOf(s);
      if (at >= 0 && (cut < 0 || at + s.length < stopEnd)) {
        cut = at;
        stopEnd = at + s.length;
      }
    }
    if (cut >= 0) {
      const kept: string[] = [];
      let offset = 0;
      let generated = 0;
      for (const token of tokens) {
        if (offset < cut) kept.push(token.slice(0, cut - offset));
        offset += token.length;
        generated++;
        if (offset >= stopEnd) break;
      }
      return { tokens: kept, generated, finishReason: 'stop' };
    }
  }
  return { tokens: [...tokens], generated: tokens.length, finishReason: 'length' };
}
