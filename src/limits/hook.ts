import type { FastifyInstance } from 'fastify';
import type { ApiKey, Store } from '../store/index.js';
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
      !limitedPerMinute(deps.limiter, key) ||
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

/**
 * The hook's headers for an answer that writes its own head, past the hook (a resumed stream): read
 * from the store for a caller with a per-minute limit, none for any other.
 */
export async function currentRateHeaders(
  deps: { store: Store; limiter: Limiter },
  key: ApiKey | null | undefined,
): Promise<Record<string, string>> {
  return limitedPerMinute(deps.limiter, key) ? rateHeaders(await deps.limiter.peek(deps.store, key)) : {};
}

function limitedPerMinute(limiter: Limiter, key: ApiKey | null | undefined): key is ApiKey {
  return (
    // Null before authentication has run (an answer refusing it).
    !!key &&
    limiter
      .scopes(key)
      .some((s) => s.limits.requests_per_minute !== undefined || s.limits.tokens_per_minute !== undefined)
  );
}
