import type { ChatBody } from '../chat/schema.js';
import type { ChatChunk, ChatCompletion } from '../engines/types.js';
import { type ErrorBody, errorCatalogue } from '../errors.js';

export type { ChatChunk, ChatCompletion, ChatMessage } from '../engines/types.js';

/** A chat-completions request: the OpenAI body plus Kiln's `contexts` and `webhook`; the client sets the mode. */
export type ChatRequest = Omit<ChatBody, 'mode' | 'stream'> & Record<string, unknown>;

/** The 202 answer to an async submission (`mode: "async"`). */
export interface ChatSubmission {
  id: string;
  object: 'chat.completion.async';
  status: string;
  polling_url: string;
  created: number;
}

/** Options of a call that creates a job. */
export interface SubmitOptions {
  /** Sent as Idempotency-Key: the same key and body within 24 h get the first answer again. */
  idempotencyKey?: string;
  /** Aborts the request (for a stream: stops reading, which cancels the job). */
  signal?: AbortSignal;
}

const catalogue = errorCatalogue as Record<string, { status: number; type: string } | undefined>;

/** The status an error code has when the gateway answers it over HTTP; 502 for codes it does not know. */
export const statusOfCode = (code: string): number => catalogue[code]?.status ?? 502;

/** The envelope `type` of an error code; `server_error` for codes it does not know. */
export const typeOfCode = (code: string): string => catalogue[code]?.type ?? 'server_error';

/** One server-sent event: its `event:` name (default `message`) and its `data:` lines joined. */
export interface SseEvent {
  event: string;
  data: string;
}

/** Splits a `text/event-stream` body into events as its bytes arrive. */
export async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event = 'message';
  let data: string[] = [];
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      for (let end = buffer.search(/\r\n|\r|\n/); end >= 0; end = buffer.search(/\r\n|\r|\n/)) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(buffer.startsWith('\r\n', end) ? end + 2 : end + 1);
        if (line === '') {
          if (data.length > 0) yield { event, data: data.join('\n') };
          event = 'message';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') data.push(value);
        else if (field === 'event') event = value;
      }
      if (done) {
        // A last event without its blank line still counts.
        if (buffer !== '' && buffer.startsWith('data:')) data.push(buffer.slice(5).replace(/^ /, ''));
        if (data.length > 0) yield { event, data: data.join('\n') };
        return;
      }
    }
  } finally {
    // Stopping early (break, error) closes the connection, which cancels the job on the gateway.
    await reader.cancel().catch(() => undefined);
  }
}

/**
 * The chunks of a chat stream, until `data: [DONE]`. An error event (`{"error": {…}}` data, or
 * `event: error`) throws it; a body that ends without [DONE] throws `stream-incomplete`.
 */
export async function* chatChunks(
  body: ReadableStream<Uint8Array>,
  fail: (status: number, error: ErrorBody) => Error,
): AsyncGenerator<ChatChunk> {
  try {
    for await (const { event, data } of sseEvents(body)) {
      if (data === '[DONE]') return;
      let parsed: unknown;
      try {
        parsed = JSON.parse(data);
      } catch {
        throw fail(502, {
          type: 'server_error',
          code: 'invalid-stream',
          message: `the stream sent an event that is not JSON: ${data.slice(0, 200)}`,
        });
      }
      const error = (parsed as { error?: ErrorBody } | null)?.error;
      if (event === 'error' || (error && typeof error === 'object')) {
        const envelope: ErrorBody =
          error && typeof error.code === 'string'
            ? error
            : { type: 'server_error', code: 'inference-failed', message: data.slice(0, 200) };
        throw fail(statusOfCode(envelope.code), envelope);
      }
      yield parsed as ChatChunk;
    }
  } catch (error) {
    if (!(error instanceof TypeError) && (error as Error).name !== 'SocketError') throw error;
    // undici reports a connection cut mid-body as a TypeError ("terminated").
    const cause = (error as { cause?: { message?: string } }).cause?.message;
    throw fail(502, {
      type: 'server_error',
      code: 'stream-incomplete',
      message: `the stream was cut before it finished (${cause ?? (error as Error).message})`,
    });
  }
  throw fail(502, {
    type: 'server_error',
    code: 'stream-incomplete',
    message: 'the stream ended before data: [DONE]; the answer may be cut short',
  });
}

/** The text of a completion's first choice ('' when it has none). */
export function contentOf(completion: ChatCompletion): string {
  const content = completion.choices[0]?.message.content;
  return typeof content === 'string' ? content : '';
}

/** The text a chunk adds to the first choice ('' when it adds none). */
export function deltaOf(chunk: ChatChunk): string {
  const content = chunk.choices[0]?.delta.content;
  return typeof content === 'string' ? content : '';
}
