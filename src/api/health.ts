import type { FastifyInstance } from 'fastify';
import { KilnError } from '../errors.js';
import type { Store } from '../store/index.js';

/**
 * How long /readyz waits for the store: a store that takes connections but does not answer (a
 * PostgreSQL server stuck or partitioned away) is not ready, and the probe must say so, not hang.
 * Under the 1 s a Kubernetes probe waits by default, with room for the answer.
 */
export const READY_TIMEOUT_MS = 800;

/** Unauthenticated probes: /healthz says the process is up, /readyz that the store answers. */
export function healthRoutes(app: FastifyInstance, deps: { store: Store }): void {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (request) => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), READY_TIMEOUT_MS);
    });
    try {
      if ((await Promise.race([deps.store.ping(), late])) === 'late') {
        request.log.warn(`store did not answer within ${READY_TIMEOUT_MS} ms`);
        throw new KilnError('store-unavailable', `the store did not answer within ${READY_TIMEOUT_MS} ms`);
      }
    } catch (error) {
      if (error instanceof KilnError) throw error;
      request.log.warn({ err: error }, 'store unreachable');
      throw new KilnError('store-unavailable', 'the store is not reachable');
    } finally {
      clearTimeout(timer);
    }
    return { status: 'ready', store: deps.store.dialect };
  });
}
