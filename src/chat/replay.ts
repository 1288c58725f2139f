import { chunksOf } from '../engines/openai/assemble.js';
import type { ChatCompletion } from '../engines/types.js';
import type { JobRow } from '../store/types.js';
import type { ChatJobRequest } from './schema.js';

/**
 * A completed chat stream's answer again, for a retry with its Idempotency-Key: its stored
 * completion as the events of a stream of it — one chunk a choice, its whole message as the delta,
 * the usage chunk if the stream asked for it — then `[DONE]`. Same id, model and content; the
 * content comes in one chunk a choice rather than token by token.
 */
export function chatReplay(job: JobRow): string {
  const completion = JSON.parse(job.result ?? '{}') as ChatCompletion;
  const { includeUsage } = JSON.parse(job.request) as ChatJobRequest;
  let events = '';
  for (const chunk of chunksOf(completion)) {
    if (!includeUsage && chunk.choices.length === 0) continue;
    // As the stream carried them: `usage` null on every chunk but the usage chunk, where asked for.
    const event = includeUsage && chunk.usage === undefined ? { ...chunk, usage: null } : chunk;
    events += `data: ${JSON.stringify(event)}\n\n`;
  }
  return `${events}data: [DONE]\n\n`;
}
