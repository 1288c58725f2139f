import type { FastifyInstance } from 'fastify';
import { KilnError } from '../errors.js';
import { errorEnvelope } from './errors.js';

/** Seconds a refused client is asked to wait: long enough for a load balancer to see the gateway gone. */
const RETRY_AFTER_SECONDS = '1';

/**
 * While the server closes (the drain on SIGTERM), a request that still arrives on a connection opened
 * before it is refused before anything runs: `503 shutting-down` in Kiln's envelope, with
 * `Retry-After`, and the connection closed (Fastify adds `Connection: close`). Nothing is accepted
 * that the drain would then wait for; the client sends it again and reaches another gateway or this
 * one restarted. Clients that retry a 503 by themselves (OpenAI's SDKs do) need no code for it.
 */
export function refuseWhileClosing(app: FastifyInstance): void {
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', function refuseIfClosing(request, reply, done) {
    if (!closing) return done();
    request.log.info('refused: the gateway is shutting down');
    const error = new KilnError(
      'shutting-down',
      'this gateway is shutting down; send the request again, to another gateway or once this one is back',
    );
    reply.header('retry-after', RETRY_AFTER_SECONDS).status(error.status).send(errorEnvelope(error));
  });
}
