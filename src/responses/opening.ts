import type { ResponseEvent } from '../store/index.js';
import { frame } from './events.js';
import { responseObject } from './output.js';
import { createdAtOf, RESPONSE_PREFIX } from './present.js';
import type { ResponseJobRequest } from './schema.js';

/**
 * The events a background stream opens with, numbered 0 and 1: `response.created` and
 * `response.queued`, the response `queued`. The gateway that takes the request sends them the moment
 * the job is stored, as OpenAI does, so a client that goes away before the first token still has
 * the id to resume with. They follow from the job alone, so they are not logged: a resumed stream
 * makes them again, and the run's own events are numbered after them.
 */
export function openingEvents(jobId: string, request: ResponseJobRequest): ResponseEvent[] {
  const response = responseObject(
    {
      id: `${RESPONSE_PREFIX}${jobId}`,
      model: request.model,
      createdAt: createdAtOf(jobId),
      status: 'queued',
    },
    request.echo,
  );
  return [
    { seq: 0, data: frame({ type: 'response.created', response, sequence_number: 0 }) },
    { seq: 1, data: frame({ type: 'response.queued', response, sequence_number: 1 }) },
  ];
}

/** Whether a response opens with those events: one created with background and stream. */
export const opensQueued = (request: ResponseJobRequest): boolean =>
  request.echo.background && request.echo.stream;

/** The opening events' text, as a stream writes them. */
export const openingText = (jobId: string, request: ResponseJobRequest): string =>
  openingEvents(jobId, request)
    .map((event) => event.data)
    .join('');
