import { createHash } from 'node:crypto';

/**
 * The simulator's tokenizer: deterministic, table-free and fast, with the proportions of a real
 * BPE vocabulary. Scanning from the start, the next token is the first of these that matches:
 *
 * 1. an optional single space and then 1–4 ASCII letters (` ?[A-Za-z]{1,4}`), so ` the`, `Foll`;
 * 2. one ASCII digit;
 * 3. a run of ASCII whitespace (space, tab, newline, carriage return, form feed, vertical tab);
 * 4. any other single character: punctuation, symbols, and each non-ASCII code point (a CJK
 *    character or an emoji is one token, a surrogate pair included).
 *
 * As a regular expression: `/ ?[A-Za-z]{1,4}|[0-9]|[\t-\r ]+|./gsu`. English prose comes out
 * at about 3.5 characters per token (real BPE vocabularies: about 4), digits, punctuation and
 * CJK text at one.
 */
export function tokenize(text: string): string[] {
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    const end = tokenEnd(text, at);
    pieces.push(text.slice(at, end));
    at = end;
  }
  return pieces;
}

/** How many tokens `tokenize(text)` gives, without building them. */
export function countTokens(text: string): number {
  let count = 0;
  for (let at = 0; at < text.length; at = tokenEnd(text, at)) count++;
  return count;
}

/** `charCodeAt` past the end is NaN, which none of these match. */
const isLetter = (code: number) => (code | 32) >= 97 && (code | 32) <= 122;
const isSpace = (code: number) => code === 32 || (code >= 9 && code <= 13);

/** Where the token starting at `at` (< text.length) ends. */
export function tokenEnd(text: string, at: number): number {
  const code = text.charCodeAt(at);
  let letters = -1;
  if (isLetter(code)) letters = at;
  else if (code === 32 && isLetter(text.charCodeAt(at + 1))) letters = at + 1;
  if (letters >= 0) {
    const limit = Math.min(letters + 4, text.length);
    let end = letters + 1;
    while (end < limit && isLetter(text.charCodeAt(end))) end++;
    return end;
  }
  if (isSpace(code)) {
    let end = at + 1;
    while (isSpace(text.charCodeAt(end))) end++;
    return end;
  }
  // A digit, or any other character: one code point (both halves of a surrogate pair).
  if (code >= 0xd800 && code <= 0xdbff) {
    const low = text.charCodeAt(at + 1);
    if (low >= 0xdc00 && low <= 0xdfff) return at + 2;
  }
  return at + 1;
}

/** The vocabulary size token ids are spread over (Llama 3's is 128,256). */
export const VOCABULARY_SIZE = 128_000;

/** A token's id: a hash of its text (32-bit FNV-1a) modulo VOCABULARY_SIZE, the same everywhere. */
export function tokenId(piece: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < piece.length; i++) {
    hash ^= piece.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % VOCABULARY_SIZE;
}

export interface ChatMessage {
  role: string;
  content: string;
}

/**
 * A chat template in the spirit of Llama 3's: each message as `<|role|>content\n`, then the
 * assistant's turn opened (add_generation_prompt). Shared leading messages render to shared
 * leading text, which is what a prefix cache needs. Without the generation prompt (as /tokenize
 * may ask) the assistant's turn is left out.
 */
export function renderChatPrompt(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
  let prompt = '';
  for (const message of messages) prompt += `<|${message.role}|>${message.content}\n`;
  return addGenerationPrompt ? `${prompt}<|assistant|>` : prompt;
}

/** Short words, so that generated text re-tokenises to roughly the tokens it was generated as. */
const VOCABULARY = (
  'the a of to and in is it that for on with as was at by this from or an are be we can one ' +
  'all new more time way use data fire clay kiln heat glaze form shape cool slow fast warm ' +
  'pot bowl cup wheel hand stone ash salt iron blue red gold white then when each day run ' +
  'load test'
).split(' ');

/** sfc32: a small, fast PRNG with a 128-bit state, seeded from a hash so that any key works. */
export function seededRandom(key: string): () => number {
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
  /** The stop string that ended the output, if one did. */
  stopString?: string;
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
    let matched = '';
    for (const s of stop) {
      const at = text.indexOf(s);
      if (at >= 0 && (cut < 0 || at + s.length < stopEnd)) {
        cut = at;
        stopEnd = at + s.length;
        matched = s;
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
      return { tokens: kept, generated, finishReason: 'stop', stopString: matched };
    }
  }
  return { tokens: [...tokens], generated: tokens.length, finishReason: 'length' };
}
