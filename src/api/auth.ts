import type { FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { authenticate } from '../auth/keys.js';
import { KilnError } from '../errors.js';
import type { ApiKey, Store } from '../store/index.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The caller's key, resolved by `requireApiKey`; its org is the only org the request can touch. */
    auth: ApiKey;
  }
}

/** The onRequest hook of every authenticated route: `Authorization: Bearer kiln_sk_…` or 401. */
export function requireApiKey(store: Store) {
  return async function authenticateRequest(request: FastifyRequest): Promise<void> {
    const header = request.headers.authorization;
    if (!header) {
      throw new KilnError('unauthorized', 'missing API key: send Authorization: Bearer <key>');
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw new KilnError('unauthorized', 'the Authorization header must be "Bearer <key>"');
    const key = await authenticate(store, match[1] as string);
    if (!key) throw new KilnError('unauthorized', 'the API key is unknown or has been revoked');
    request.auth = key;
    // The request's own logger (Fastify makes one per request) carries the caller from here on;
    // an app without a pino logger gets a child instead.
    const caller = { org_id: key.org_id, key_id: key.id };
    const log = request.log as Partial<Logger>;
    if (typeof log.setBindings === 'function') log.setBindings(caller);
    else request.log = request.log.child(caller);
  };
}
