import { hash } from 'node:crypto';
import type { ChatMessage } from '../engines/types.js';

/** The text of a message's content: a string, or the `text` of its content parts. */
export const contentText = (content: unknown): string =>
  typeof content === 'string'
    ? content
    : Array.isArray(content)
      ? content.map((part) => (typeof part?.text === 'string' ? part.text : '')).join('')
      : '';

/**
 * The conversation as the router compares prompts: each message's role and text, in order. Two
 * prompts that share leading messages share leading text here, as they do in an engine's chat
 * template, so a block chain over it follows the engine's prefix cache.
 */
export function routingText(messages: readonly ChatMessage[]): string {
  let text = '';
  for (const message of messages) text += `${message.role}\u0000${contentText(message.content)}\u0001`;
  return text;
}

/** Characters of the leading system (or developer) messages: the persona's preamble and contexts. */
export function leadingChars(messages: readonly ChatMessage[]): number {
  let chars = 0;
  for (const message of messages) {
    if (message.role !== 'system' && message.role !== 'developer') break;
    chars += contentText(message.content).length;
  }
  return chars;
}

/**
 * Where a prompt's cache is kept apart from others': an organisation's own scope, or '' (shared).
 * It seeds the block chain, so one scope's keys never match another's.
 */
export const cacheScope = (org: string | undefined): string => (org ? `org\u0000${org}\u0001` : '');

/**
 * The `cache_salt` sent for a scope to an engine that takes one: derived, not the organisation's
 * id, which the engine's logs need not hold.
 */
export const cacheSalt = (scope: string): string =>
  hash('sha256', `kiln-cache-salt\u0000${scope}`, 'base64url').slice(0, 22);

/**
 * The hash chain of the text's whole blocks of `blockChars` characters, as engines key their prefix
 * caches: block i's key covers block i and every block before it, so equal keys mean equal prefixes.
 * A trailing partial block has no key. 96 bits a key: collisions are out of reach at any fleet size.
 */
export function blockChain(text: string, blockChars: number, scope = ''): string[] {
  const keys: string[] = [];
  // A scope's chain starts from its own key, 16 characters, where a shared chain starts empty.
  let previous = scope === '' ? '' : hash('sha1', scope, 'base64').slice(0, 16);
  for (let at = 0; at + blockChars <= text.length; at += blockChars) {
    previous = hash('sha1', previous + text.slice(at, at + blockChars), 'base64').slice(0, 16);
    keys.push(previous);
  }
  return keys;
}

/** Whether any message holds an image part: only replicas whose model reads images take it. */
export const hasImages = (messages: readonly ChatMessage[]): boolean =>
  messages.some((m) => Array.isArray(m.content) && m.content.some((part) => part?.type === 'image_url'));
