import type OpenAI from 'openai';
import { expectValidStreamEvent } from '../helpers/openai-schema.js';

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/**
 * A Responses stream's events, each held to OpenAI's schema for its type: all of them, or the first
 * `n`, after which the connection goes away.
 */
export async function takeEvents(
  stream: AsyncIterable<StreamEvent>,
  n = Number.POSITIVE_INFINITY,
): Promise<StreamEvent[]> {
  const events: StreamEvent[] = [];
  for await (const event of stream) {
    expectValidStreamEvent(event);
    events.push(event);
    if (events.length >= n) break;
  }
  return events;
}
