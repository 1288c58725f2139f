import type { FastifyError, FastifyInstance } from 'fastify';
import { type ErrorCode, KilnError, validationError } from '../errors.js';
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
};

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
    const detail = known.code === 'invalid-json' ? fastify.message : undefined;
    return new KilnError(known.code, known.message ?? fastify.message, {
      details: detail ? [{ field: 'body', rule: 'json', message: detail }] : undefined,
    });
  }
  const status = statusCode(fastify);
  if (status === 400) {
    // e.g. a JSON body carrying __proto__, or a malformed URL
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

/** Installs the error and not-found handlers that give every non-2xx answer the envelope. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const kiln = toKilnError(error);
    if (kiln.status >= 500) request.log.error({ err: error }, 'request failed');
    else request.log.info({ code: kiln.code, status: kiln.status }, kiln.message);
    if (kiln.status === 401) reply.header('www-authenticate', 'Bearer');
    return reply.status(kiln.status).send({ error: kiln.toBody(), ...kiln.attach });
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new KilnError('route-not-found', `no route ${request.method} ${request.url.split('?')[0]}`);
    return reply.status(error.status).send({ error: error.toBody() });
  });
}
