import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type ErrorBody, type ErrorCode, KilnError, validationError } from '../errors.js';
import { toDetails } from './validation.js';

/** Fastify's own request errors, in Kiln's words. */
const fastifyCodes: Record<string, { code: ErrorCode; message?: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid-json', message: 'the body is not valid JSON' },
  FST_ERR_CTP_EMPTY_JSON_BODY: {
    code: 'invalid-json',
    message: 'Content-Type is application/json but the body is empty',
  },
  FST_ERR_CTP_BODY_TOO_LARGE: {
    code: 'request-too-large',
    message: 'the request body is larger than the server accepts',
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    code: 'unsupported-media-type',
    message: 'send the body as JSON with Content-Type: application/json',
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: {
    code: 'invalid-json',
    message: 'Content-Length does not match the body',
  },
  // Raised before routing (see `frameworkErrors`): a path that does not decode, or a path parameter
  // longer than any id Kiln issues.
  FST_ERR_BAD_URL: { code: 'validation-failed', message: 'the request path is not validly percent-encoded' },
  FST_ERR_MAX_PARAM_LENGTH: { code: 'validation-failed', message: 'a path parameter is too long' },
};

/**
 * The body of every non-2xx answer. `param` is always present, null when no field is at fault:
 * OpenAI's error schema requires the key, and OpenAI clients read it.
 */
export function errorEnvelope(error: { toBody(): ErrorBody }): {
  error: Omit<ErrorBody, 'param'> & { param: string | null };
} {
  const { param, details, ...rest } = error.toBody();
  return { error: { ...rest, param: param ?? null, ...(details ? { details } : {}) } };
}

function statusCode(error: FastifyError): number {
  return typeof error.statusCode === 'number' ? error.statusCode : 500;
}

/** Turns whatever a request throws into the envelope; nothing but 'internal-error' ever reaches a 500. */
export function toKilnError(error: FastifyError | KilnError | Error): KilnError {
  if (error instanceof KilnError) return error;
  const fastify = error as FastifyError;
  if (fastify.validation) {
    const root = fastify.validationContext ?? 'body';
    return validationError(toDetails(fastify.validation as never, root));
  }
  const known = fastify.code ? fastifyCodes[fastify.code] : undefined;
  if (known) {
    const field = known.code === 'invalid-json' ? 'body' : known.code === 'validation-failed' ? 'path' : '';
    // Fastify's words for a path quote the whole URL, its query's signature or token too: not echoed.
    const said = field === 'path' ? (known.message ?? fastify.message) : fastify.message;
    return new KilnError(known.code, known.message ?? fastify.message, {
      details: field ? [{ field, rule: field === 'body' ? 'json' : 'request', message: said }] : undefined,
    });
  }
  const status = statusCode(fastify);
  if (status === 400) {
    // e.g. a malformed URL
    return new KilnError('validation-failed', fastify.message, {
      details: [{ field: 'body', rule: 'request', message: fastify.message }],
    });
  }
  if (status === 413) return new KilnError('request-too-large', fastify.message);
  if (status === 415) return new KilnError('unsupported-media-type', fastify.message);
  return new KilnError('internal-error', 'the server failed to handle this request; it has been logged', {
    cause: error,
  });
}

/** Answers `error` with the envelope: the error handler, and Fastify's `frameworkErrors` before routing. */
export function sendError(
  error: FastifyError | KilnError | Error,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const kiln = toKilnError(error);
  if (kiln.status >= 500) request.log.error({ err: error }, 'request failed');
  else request.log.info({ code: kiln.code, status: kiln.status }, kiln.message);
  if (kiln.status === 401) reply.header('www-authenticate', 'Bearer');
  if (kiln.headers) reply.headers(kiln.headers);
  return reply.status(kiln.status).send({ ...errorEnvelope(kiln), ...kiln.attach });
}

/**
 * Node's HTTP parser refuses some requests before Fastify sees them (a malformed request line,
 * headers over the size limit): the socket still gets the envelope, then closes.
 */
export function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  // 408 has no code in the catalogue, and the client that timed out is rarely listening: Node's answer.
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    socket.end('HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  const kiln =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? new KilnError('request-too-large', 'the request headers are larger than the server accepts')
      : new KilnError('validation-failed', 'the request is not valid HTTP/1.1', {
          details: [{ field: 'request', rule: 'request', message: 'the request is not valid HTTP/1.1' }],
        });
  const body = JSON.stringify(errorEnvelope(kiln));
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${kiln.status} ${STATUS_CODES[kiln.status]}\r\nConnection: close\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}

/**
 * An `Expect` other than `100-continue` (the one Node answers itself), which Node would refuse with
 * an empty 417: refused in the envelope instead, before the request reaches any route.
 */
function refuseExpectation(request: IncomingMessage, response: ServerResponse): void {
  const expectation = String(request.headers.expect).slice(0, 100);
  const message = `Expect: ${expectation} is not supported; only 100-continue is`;
  const body = JSON.stringify(
    errorEnvelope(
      new KilnError('expectation-failed', message, {
        details: [{ field: 'headers.expect', rule: 'enum', message, allowed: ['100-continue'] }],
      }),
    ),
  );
  response.writeHead(417, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  response.end(body);
}

/** Installs the error and not-found handlers that give every non-2xx answer the envelope. */
export function installErrorHandling(app: FastifyInstance): void {
  app.server.on('checkExpectation', refuseExpectation);
  app.setErrorHandler((error: FastifyError, request, reply) => sendError(error, request, reply));
  app.setNotFoundHandler((request, reply) => {
    const error = new KilnError('route-not-found', `no route ${request.method} ${request.url.split('?')[0]}`);
    return reply.status(error.status).send(errorEnvelope(error));
  });
}
