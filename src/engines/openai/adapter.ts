import { type Dispatcher, errors, Pool } from 'undici';
import {
  type ChatCall,
  type ChatChunk,
  type ChatCompletion,
  type ChatMessage,
  type EngineAdapter,
  EngineError,
  type EngineProbe,
  type ReplicaTarget,
} from '../types.js';
import { CompletionAssembler } from './assemble.js';
import {
  contextFromModels,
  contextFromProps,
  isContextLengthError,
  probeFromMetrics,
  tokenCount,
} from './discovery.js';
import { sseData } from './sse.js';

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

/** undici's and the socket's failures, as engine errors. */
function asEngineError(error: unknown, replica: ReplicaTarget, beforeOutput: boolean): EngineError {
  if (error instanceof EngineError) return error;
  const code = (error as { code?: string }).code ?? '';
  const message = (error as Error).message ?? String(error);
  if (
    error instanceof errors.HeadersTimeoutError ||
    error instanceof errors.BodyTimeoutError ||
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
 * One adapter for every server that speaks the OpenAI chat-completions protocol: vLLM, SGLang,
 * llama.cpp server, Ollama's /v1 and TGI. Keep-alive connection pools per replica (undici), at most
 * the replica's concurrency in flight.
 */
export class OpenAICompatibleAdapter implements EngineAdapter {
  readonly capabilities = { streaming: true, cancel: true, prefixCache: true, introspection: true } as const;
  readonly #pools = new Map<string, Pool>();
  /** Health checks and introspection on connections of their own, so a busy replica still answers them. */
  readonly #probePools = new Map<string, Pool>();

  #probePool(replica: ReplicaTarget): Pool {
    const origin = new URL(replica.url).origin;
    let pool = this.#probePools.get(origin);
    if (!pool) {
      pool = new Pool(origin, { connections: 2, connect: { timeout: replica.connectTimeoutMs } });
      this.#probePools.set(origin, pool);
    }
    return pool;
  }

  /** A GET or POST on the probe connections; undefined for anything but a 2xx JSON (or text) answer. */
  async #ask(
    replica: ReplicaTarget,
    path: string,
    timeoutMs: number,
    body?: unknown,
  ): Promise<{ text: string } | undefined> {
    try {
      const response = await this.#probePool(replica).request({
        method: body === undefined ? 'GET' : 'POST',
        path: this.#path(replica, path),
        headers: {
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(replica.apiKey ? { authorization: `Bearer ${replica.apiKey}` } : {}),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await response.body.text();
      return response.statusCode < 300 ? { text } : undefined;
    } catch {
      return undefined;
    }
  }

  async #askJson(replica: ReplicaTarget, path: string, timeoutMs: number, body?: unknown): Promise<unknown> {
    const answer = await this.#ask(replica, path, timeoutMs, body);
    try {
      return answer ? JSON.parse(answer.text) : undefined;
    } catch {
      return undefined;
    }
  }

  async probe(replica: ReplicaTarget, timeoutMs: number): Promise<EngineProbe> {
    const answer = await this.#ask(replica, '/metrics', timeoutMs);
    return answer ? probeFromMetrics(answer.text) : {};
  }

  async contextTokens(replica: ReplicaTarget, model: string, timeoutMs: number): Promise<number | undefined> {
    // llama.cpp's /props gives the per-slot context, which is what a request gets.
    return (
      contextFromProps(await this.#askJson(replica, '/props', timeoutMs)) ??
      contextFromModels(await this.#askJson(replica, '/v1/models', timeoutMs), model)
    );
  }

  async countTokens(
    replica: ReplicaTarget,
    model: string,
    messages: readonly ChatMessage[],
    timeoutMs: number,
  ): Promise<number | undefined> {
    // vLLM and SGLang apply the chat template to `messages`; llama.cpp's /tokenize counts only a
    // plain `content` (and answers no tokens for `messages`), so that is the second try.
    const chat = tokenCount(await this.#askJson(replica, '/tokenize', timeoutMs, { model, messages }));
    if (chat) return chat;
    const content = messages.map((m) => (typeof m.content === 'string' ? m.content : '')).join('\n');
    return tokenCount(await this.#askJson(replica, '/tokenize', timeoutMs, { content })) || undefined;
  }

  /** A pool per replica of each engine entry: two entries on one server keep their own limits. */
  #pool(replica: ReplicaTarget): Pool {
    const origin = new URL(replica.url).origin;
    const key = `${replica.label}\u0000${origin}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      pool = new Pool(origin, {
        connections: replica.maxConcurrency,
        pipelining: 1,
        connect: { timeout: replica.connectTimeoutMs },
        headersTimeout: replica.timeoutMs,
        bodyTimeout: replica.timeoutMs,
        keepAliveTimeout: 30_000,
      });
      this.#pools.set(key, pool);
    }
    return pool;
  }

  #path(replica: ReplicaTarget, path: string): string {
    const base = new URL(replica.url).pathname.replace(/\/+$/, '');
    return `${base}${path}`;
  }

  /**
   * Streams from the engine in every mode — engines notice a closed stream and stop generating, and
   * do not notice a closed non-streaming request — and folds the stream into the completion, so a
   * cancelled job stops the GPU whatever its mode. The caller's `onChunk` sees each chunk.
   */
  async chat(replica: ReplicaTarget, call: ChatCall): Promise<ChatCompletion> {
    const body = { ...call.body, stream: true, stream_options: { include_usage: true } };
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#pool(replica).request({
        method: 'POST',
        path: this.#path(replica, '/v1/chat/completions'),
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          ...(replica.apiKey ? { authorization: `Bearer ${replica.apiKey}` } : {}),
        },
        body: JSON.stringify(body),
        signal: call.signal,
      });
    } catch (error) {
      throw asEngineError(error, replica, true);
    }
    if (response.statusCode >= 400) {
      const text = await response.body.text().catch(() => '');
      const { message, fields } = upstreamError(text);
      const status = response.statusCode;
      if (status >= 500 || status === 429) {
        throw new EngineError(`${replica.label} answered ${status}: ${message}`, 'unavailable', true, status);
      }
      // The request's own fault: the engine's words, unprefixed, for the caller.
      throw new EngineError(message, 'rejected', true, status, isContextLengthError(text), fields);
    }
    const contentType = String(response.headers['content-type'] ?? '');
    if (!contentType.includes('text/event-stream')) {
      // An engine that ignored `stream: true` answered the whole completion at once.
      try {
        const completion = (await response.body.json()) as ChatCompletion;
        return completion;
      } catch (error) {
        throw asEngineError(error, replica, true);
      }
    }
    const assembler = new CompletionAssembler();
    // Output counts once it reached the caller: a sync or async answer that breaks off may be retried.
    let sent = false;
    let first = true;
    let done = false;
    try {
      for await (const data of sseData(response.body)) {
        if (data === '[DONE]') {
          done = true;
          break;
        }
        const chunk = JSON.parse(data) as ChatChunk & { error?: { message?: string } };
        if (chunk.error)
          throw new EngineError(
            `${replica.label} failed mid-answer: ${chunk.error.message}`,
            'broken',
            !sent,
          );
        assembler.add(chunk);
        if (first) {
          first = false;
          call.onFirstChunk?.();
        }
        if (call.onChunk) {
          call.onChunk(chunk);
          sent = true;
        }
      }
    } catch (error) {
      throw asEngineError(error, replica, !sent);
    }
    if (!done) throw new EngineError(`${replica.label} ended the stream before [DONE]`, 'broken', !sent);
    return assembler.result();
  }

  async healthy(replica: ReplicaTarget, timeoutMs: number): Promise<boolean> {
    try {
      const response = await this.#probePool(replica).request({
        method: 'GET',
        path: this.#path(replica, replica.healthPath),
        headers: replica.apiKey ? { authorization: `Bearer ${replica.apiKey}` } : {},
        signal: AbortSignal.timeout(timeoutMs),
      });
      await response.body.dump();
      return response.statusCode < 400;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.#pools.values(), ...this.#probePools.values()].map((pool) => pool.close()));
    this.#pools.clear();
    this.#probePools.clear();
  }
}
