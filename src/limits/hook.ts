import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/index.js';
import type { Limiter } from './admission.js';
import { rateHeaders } from './refusal.js';

/**
 * OpenAI's `x-ratelimit-*` headers on every answer to a caller with a per-minute limit: answers
 * that create work carry them from their admission (or refusal); the rest — polls, lists,
 * contexts — get them here, read from the store. Callers without such limits cost nothing.
 */
export function rateHeadersHook(app: FastifyInstance, deps: { store: Store; limiter: Limiter }): void {
  app.addHook('onSend', async (request, reply, payload) => {
    const key = request.auth;
    if (!key || reply.hasHeader('x-ratelimit-limit-requests') || reply.hasHeader('x-ratelimit-limit-tokens'))
      return payload;
    const windows = await deps.limiter.peek(deps.store, key).catch(() => ({}));
    reply.headers(rateHeaders(windows));
    return payload;
  });
}
