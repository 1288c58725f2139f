import type { ChatChunk } from '../engines/types.js';
import type { JobRow } from '../store/types.js';
import { ResponseEvents } from './events.js';
import { outputIds } from './items.js';
import { openingText, opensQueued } from './opening.js';
import { responseObject } from './output.js';
import { createdAtOf, RESPONSE_PREFIX } from './present.js';
import type { Item, ResponseJobRequest } from './schema.js';

/** One choice's delta as the chunk ResponseEvents reads. */
const chunkOf = (delta: Record<string, unknown>) =>
  ({ choices: [{ index: 0, delta }] }) as unknown as ChatChunk;

/**
 * A completed streamed response again, for a retry with its Idempotency-Key: the events a stream of
 * its stored output makes, numbered from 0 — `response.created` (and `response.queued` for a
 * background one) and `response.in_progress`, each
 * output item with its text or arguments as one delta, and the terminal event with the response as
 * stored. The same ids and text as the first stream; fewer deltas.
 */
export function responseReplay(job: JobRow): string {
  const request = JSON.parse(job.request) as ResponseJobRequest;
  const response = JSON.parse(job.result ?? '{}') as Record<string, unknown> & { output?: Item[] };
  // A background stream opened with the gateway's events; the run's are numbered after them.
  const opened = opensQueued(request);
  let events = opened ? openingText(job.id, request) : '';
  const stream = new ResponseEvents(
    (text) => {
      events += text;
    },
    outputIds(job.id),
    opened,
  );
  const base = { id: `${RESPONSE_PREFIX}${job.id}`, model: request.model, createdAt: createdAtOf(job.id) };
  stream.start(responseObject({ ...base, status: 'in_progress' }, request.echo));
  let calls = 0;
  for (const item of response.output ?? []) {
    if (item.type === 'message') {
      // Each part as one delta, in its order: its text, or its refusal.
      for (const part of (item.content ?? []) as Array<{ type?: string; text?: string; refusal?: string }>) {
        if (part.type === 'output_text' && part.text) stream.chunk(chunkOf({ content: part.text }));
        else if (part.type === 'refusal' && part.refusal) stream.chunk(chunkOf({ refusal: part.refusal }));
      }
    } else if (item.type === 'function_call') {
      const call = {
        index: calls++,
        id: item.call_id,
        function: { name: item.name, arguments: item.arguments },
      };
      stream.chunk(chunkOf({ tool_calls: [call] }));
    }
  }
  const status = response.status === 'incomplete' ? 'incomplete' : 'completed';
  // An empty answer has its empty message, unless it was stored before such answers had one.
  if ((response.output ?? []).length > 0) stream.finish(status);
  else stream.close(status);
  stream.end(`response.${status}`, response);
  return events;
}
