import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/index.js';
import type { Limiter } from './admission.js';
import { rateHeaders } from './refusal.js';

/**
 * OpenAI's `x-ratelimit-*` headers on every answer to a caller with a per-minute limit: answers
 * that create work carry them from their admission (or refusal); the rest — polls, lists,
 * contexts — get them here, read from the store. Other callers' answers pass straight through.
 */
export function rateHeadersHook(app: FastifyInstance, deps: { store: Store; limiter: Limiter }): void {
  app.addHook('onSend', (request, reply, payload, done) => {
    const key = request.auth;
    if (
      !key ||
      !deps.limiter
        .scopes(key)
        .some(
          (s) => s.limits.requests_per_minute !== undefined || s.limits.tokens_per_minute !== undefined,
        ) ||
      reply.hasHeader('x-ratelimit-limit-requests') ||
      reply.hasHeader('x-ratelimit-limit-tokens')
    ) {
      done(null, payload);
      return;
    }
    deps.limiter.peek(deps.store, key).then(
      (windows) => {
        reply.headers(rateHeaders(windows));
        done(null, payload);
      },
      () => done(null, payload),
    );
  });
}
