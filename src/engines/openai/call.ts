import type { Dispatcher } from 'undici';
import {
  type ChatCall,
  type ChatChunk,
  type ChatCompletion,
  EngineError,
  type ReplicaTarget,
} from '../types.js';
import { CompletionAssembler, chunksOf } from './assemble.js';
import { ContentChunkShape } from './chunk-shape.js';
import { isContextLengthError } from './discovery.js';
import { FinishReasons, finishWhole } from './finish-reasons.js';
import { SseDecoder } from './sse.js';
import { ToolCallNumbering } from './tool-call-numbering.js';

/** Most of an error body or a non-stream answer kept; beyond it the answer is broken. */
const MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * The message an OpenAI-compatible server put in its error body, whatever its dialect, and the
 * other fields of its error object (`type`, `param`, llama.cpp's `n_prompt_tokens` and `n_ctx`, …).
 */
export function upstreamError(text: string): { message: string; fields: Record<string, unknown> } {
  try {
    const body = JSON.parse(text) as {
      error?: Record<string, unknown> | string;
      message?: string;
      detail?: unknown;
    };
    if (typeof body.error === 'object' && body.error !== null) {
      const { message, code: _status, ...fields } = body.error;
      if (typeof message === 'string' && message) return { message, fields };
    }
    if (typeof body.error === 'string') return { message: body.error, fields: {} };
    if (body.message) return { message: body.message, fields: {} };
    if (body.detail) {
      return {
        message: typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail),
        fields: {},
      };
    }
  } catch {}
  return { message: text.slice(0, 500) || 'no error message', fields: {} };
}

/**
 * Two choices' usage as one request's: the prompt counted once, the completion tokens (and their
 * details' counts, such as `reasoning_tokens`) added.
 */
export function addUsage(
  a: ChatChunk['usage'],
  b: NonNullable<ChatChunk['usage']>,
): NonNullable<ChatChunk['usage']> {
  if (!a) return b;
  // Counts an engine left out (or sent as no number) add nothing rather than making NaN.
  const count = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
  const completion = count(a.completion_tokens) + count(b.completion_tokens);
  const details = (x: unknown) => (x && typeof x === 'object' ? (x as Record<string, unknown>) : undefined);
  const [da, db] = [details(a.completion_tokens_details), details(b.completion_tokens_details)];
  const summed = da && db ? { completion_tokens_details: sumCounts(da, db) } : {};
  return {
    ...a,
    completion_tokens: completion,
    total_tokens: count(a.prompt_tokens) + completion,
    ...summed,
  };
}

function sumCounts(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const sum: Record<string, unknown> = { ...a };
  for (const key in b) {
    const [x, y] = [a[key], b[key]];
    sum[key] = typeof x === 'number' && typeof y === 'number' ? x + y : (x ?? y);
  }
  return sum;
}

/**
 * llama-server answers an image or audio part for a model served without its projector (`--mmproj`)
 * with a 500 in these words: the request's fault, which no other try of it and no health check would
 * mend, so it is refused as the engine's 4xx are rather than counted against the replica.
 */
const refusesMedia = (status: number, message: string) =>
  status === 500 && /^(?:image|audio) input is not supported\b/.test(message);

/** undici's and the socket's failures, as engine errors. */
export function asEngineError(error: unknown, replica: ReplicaTarget, beforeOutput: boolean): EngineError {
  if (error instanceof EngineError) return error;
  const code = (error as { code?: string }).code ?? '';
  const message = (error as Error).message ?? String(error);
  if (
    code === 'UND_ERR_HEADERS_TIMEOUT' ||
    code === 'UND_ERR_BODY_TIMEOUT' ||
    code === 'UND_ERR_CONNECT_TIMEOUT'
  ) {
    return new EngineError(
      `${replica.label} did not answer within ${replica.timeoutMs} ms`,
      'timeout',
      beforeOutput,
    );
  }
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH') {
    return new EngineError(`cannot connect to ${replica.label}: ${code}`, 'unavailable', beforeOutput);
  }
  return new EngineError(`${replica.label} broke off the answer: ${code || message}`, 'broken', beforeOutput);
}

/**
 * One streamed chat completion, as an undici dispatch handler: the engine's bytes are split into
 * events, each parsed once, folded into the completion and handed to `onChunk` with its text, in
 * the read that brought it — no stream, iterator or promise per chunk. Settles once: with the
 * assembled completion after `[DONE]`, or with an EngineError.
 */
export class ChatStreamCall implements Dispatcher.DispatchHandler {
  readonly #decoder = new SseDecoder();
  readonly #assembler = new CompletionAssembler();
  readonly #calls = new ToolCallNumbering();
  readonly #finishes = new FinishReasons();
  #shape: ContentChunkShape | undefined;
  #controller: Dispatcher.DispatchController | undefined;
  #status = 0;
  #eventStream = false;
  /** An error body, or a whole completion from an engine that ignored `stream: true`. */
  readonly #body: Buffer[] = [];
  #bodyBytes = 0;
  /** Output counts once it reached the caller: a sync or async answer that breaks off may be retried. */
  #sent = false;
  #first = true;
  #done = false;
  /**
   * With n > 1, the usage chunks so far, summed (its text while there is one): one goes on at
   * `[DONE]`. With one choice, a usage chunk that came while a choice was owed its finish reason:
   * it goes on before the next event, after the finishing chunks should that be `[DONE]`.
   */
  #usage: { chunk: ChatChunk; text: string | undefined } | undefined;
  readonly #choices: number;
  #settled = false;
  readonly #onData = (data: string) => this.#event(data);
  readonly #onAbort = () => this.#controller?.abort(this.#aborted());

  constructor(
    private readonly replica: ReplicaTarget,
    private readonly call: ChatCall,
    private readonly resolve: (completion: ChatCompletion) => void,
    private readonly reject: (error: EngineError) => void,
  ) {
    call.signal.addEventListener('abort', this.#onAbort, { once: true });
    this.#choices = typeof call.body.n === 'number' ? call.body.n : 1;
  }

  #aborted(): EngineError {
    return new EngineError(`${this.replica.label}: the call was aborted`, 'broken', !this.#sent);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.call.signal.aborted) controller.abort(this.#aborted());
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, unknown>,
  ): void {
    this.#status = statusCode;
    this.#eventStream =
      statusCode < 400 && String(headers['content-type'] ?? '').includes('text/event-stream');
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#settled) return;
    if (!this.#eventStream) {
      this.#bodyBytes += chunk.length;
      if (this.#bodyBytes > MAX_BODY_BYTES) {
        controller.abort(new EngineError(`${this.replica.label} answered more than 64 MiB`, 'broken', true));
        return;
      }
      this.#body.push(chunk);
      return;
    }
    try {
      this.#decoder.push(chunk, this.#onData);
    } catch (error) {
      controller.abort(asEngineError(error, this.replica, !this.#sent));
    }
  }

  #event(data: string): void {
    if (this.#done || this.#settled) return;
    if (data === '[DONE]') {
      this.#done = true;
      // A clean end: choices the engine never finished are finished here, before the usage chunk.
      for (const chunk of this.#finishes.closing()) this.#deliver(chunk, JSON.stringify(chunk));
      this.#releaseUsage();
      return;
    }
    // An event with empty data (`data:` alone, as a proxy's keep-alive may send) carries nothing.
    if (data.charCodeAt(0) !== 0x7b && data.trim() === '') return;
    if (this.#choices === 1 && this.#usage) this.#releaseUsage();
    // Content chunks shaped like the last one learnt are read without parsing them whole, and the
    // caller that takes their content alone gets no object for them. The first chunk is never one.
    const shape = this.#shape;
    const body = shape?.body(data);
    const content = body === undefined ? undefined : shape?.decode(body);
    if (shape && body !== undefined && content !== undefined) {
      this.#assembler.addContent(shape.index, content);
      const { onChunk, onContent } = this.call;
      if (onContent) onContent(content, body, shape);
      else if (onChunk) onChunk(shape.chunk(content), data);
      else return;
      this.#sent = true;
      return;
    }
    const chunk = JSON.parse(data) as ChatChunk & { error?: { message?: string } };
    if (chunk.error) {
      throw new EngineError(
        `${this.replica.label} failed mid-answer: ${chunk.error.message}`,
        'broken',
        !this.#sent,
      );
    }
    // A chunk without `choices` (an engine's usage chunk may leave them out) reaches the caller in
    // the OpenAI shape, with none.
    if (!Array.isArray(chunk.choices)) {
      chunk.choices = [];
      data = JSON.stringify(chunk);
    }
    // Tool calls an engine numbered all 0 reach the caller and the completion numbered 0, 1, 2 ….
    if (this.#calls.renumber(chunk)) data = JSON.stringify(chunk);
    // llama.cpp ends each of n > 1 choices with a usage chunk of its own, the first mid-stream: the
    // caller and the ledger get one, for the whole request, before [DONE], as OpenAI sends it.
    if (this.#choices > 1 && chunk.choices.length === 0 && chunk.usage) {
      const before = this.#usage?.chunk.usage;
      this.#usage = before
        ? { chunk: { ...chunk, usage: addUsage(before, chunk.usage) }, text: undefined }
        : { chunk, text: data };
      return;
    }
    // A usage chunk ahead of a choice's missing finish reason waits: OpenAI's comes after them all.
    if (chunk.choices.length === 0 && chunk.usage && this.#finishes.owed) {
      this.#usage = { chunk, text: data };
      return;
    }
    this.#deliver(chunk, data);
  }

  /** The usage chunk held back, handed on now. */
  #releaseUsage(): void {
    const usage = this.#usage;
    this.#usage = undefined;
    if (usage) this.#deliver(usage.chunk, usage.text ?? JSON.stringify(usage.chunk));
  }

  /** A parsed chunk, folded into the completion and handed on with its text. */
  #deliver(chunk: ChatChunk, data: string): void {
    this.#shape = ContentChunkShape.learn(chunk, data) ?? this.#shape;
    this.#finishes.note(chunk);
    this.#assembler.add(chunk);
    if (this.#first) {
      this.#first = false;
      this.call.onFirstChunk?.();
    }
    if (this.call.onChunk) {
      this.call.onChunk(chunk, data);
      this.#sent = true;
    }
  }

  onResponseEnd(): void {
    if (this.#settled) return;
    if (this.#eventStream) {
      if (this.#done) this.#succeed(this.#assembler.result());
      else
        this.#fail(
          new EngineError(`${this.replica.label} ended the stream before [DONE]`, 'broken', !this.#sent),
        );
      return;
    }
    const text = Buffer.concat(this.#body).toString('utf8');
    const status = this.#status;
    if (status >= 400) {
      const { message, fields } = upstreamError(text);
      if ((status >= 500 || status === 429) && !refusesMedia(status, message)) {
        this.#fail(
          new EngineError(
            `${this.replica.label} answered ${status}: ${message}`,
            'unavailable',
            true,
            status,
          ),
        );
      } else {
        // The request's own fault: the engine's words, unprefixed, for the caller.
        this.#fail(new EngineError(message, 'rejected', true, status, isContextLengthError(text), fields));
      }
      return;
    }
    // An engine that ignored `stream: true` answered the whole completion at once: a stream's
    // caller gets it as the chunks it would have streamed.
    try {
      const completion = finishWhole(JSON.parse(text) as ChatCompletion);
      this.call.onFirstChunk?.();
      const { onChunk } = this.call;
      if (onChunk) {
        this.#sent = true;
        for (const chunk of chunksOf(completion)) onChunk(chunk, JSON.stringify(chunk));
      }
      this.#succeed(completion);
    } catch (error) {
      this.#fail(asEngineError(error, this.replica, !this.#sent));
    }
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.#fail(asEngineError(error, this.replica, !this.#sent));
  }

  #succeed(completion: ChatCompletion): void {
    if (this.#settle()) this.resolve(completion);
  }

  #fail(error: EngineError): void {
    if (this.#settle()) this.reject(error);
  }

  #settle(): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    this.call.signal.removeEventListener('abort', this.#onAbort);
    return true;
  }
}
