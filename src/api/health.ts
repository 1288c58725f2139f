import type { FastifyInstance } from 'fastify';
import { KilnError } from '../errors.js';
import type { Store } from '../store/index.js';

/** Unauthenticated probes: /healthz says the process is up, /readyz that the store answers. */
export function healthRoutes(app: FastifyInstance, deps: { store: Store }): void {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (request) => {
    try {
      await deps.store.ping();
    } catch (error) {
      request.log.warn({ err: error }, 'store unreachable');
      throw new KilnError('store-unavailable', 'the store is not reachable');
    }
    return { status: 'ready', store: deps.store.dialect };
  });
}
