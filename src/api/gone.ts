import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Calls `gone` once, when the client's connection closes while its request waits for an answer, or
 * at once if it has closed already. The connection's own `close` counts as well as the response's:
 * a pipelined request's response has no socket until the answers before it are sent, and Node
 * emits no `close` on it when the connection goes meanwhile. Answers the unsubscribe, for when the
 * answer is over: a keep-alive connection serves many requests.
 */
export function whenClientGoes(request: FastifyRequest, reply: FastifyReply, gone: () => void): () => void {
  const socket = request.raw.socket;
  let called = false;
  const once = () => {
    if (called) return;
    called = true;
    gone();
  };
  reply.raw.once('close', once);
  socket?.once('close', once);
  if (reply.raw.destroyed || socket?.destroyed) once();
  return () => {
    reply.raw.off('close', once);
    socket?.off('close', once);
  };
}
