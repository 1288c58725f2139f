import { Pool } from 'undici';
import type {
  ChatCall,
  ChatCompletion,
  ChatMessage,
  EngineAdapter,
  EngineProbe,
  ModelTraits,
  ReplicaTarget,
} from '../types.js';
import { ChatStreamCall } from './call.js';
import {
  contextFromModels,
  contextFromProps,
  probeFromMetrics,
  tokenCount,
  visionFromProps,
} from './discovery.js';

/**
 * One adapter for every server that speaks the OpenAI chat-completions protocol: vLLM, SGLang,
 * llama.cpp server, Ollama's /v1 and TGI. Keep-alive connection pools per replica (undici), at most
 * the replica's concurrency in flight.
 */
export class OpenAICompatibleAdapter implements EngineAdapter {
  readonly capabilities = { streaming: true, cancel: true, prefixCache: true, introspection: true } as const;
  readonly #pools = new Map<string, Pool>();
  /** Each replica URL's path, which every request path extends. */
  readonly #bases = new Map<string, string>();
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

  async describe(replica: ReplicaTarget, model: string, timeoutMs: number): Promise<ModelTraits> {
    // llama.cpp's /props gives the per-slot context, which is what a request gets, and whether a
    // projector reads images; vLLM and SGLang have no /props, and say neither of a model's images.
    const props = await this.#askJson(replica, '/props', timeoutMs);
    const contextTokens =
      contextFromProps(props) ??
      contextFromModels(await this.#askJson(replica, '/v1/models', timeoutMs), model);
    return { contextTokens, vision: visionFromProps(props) };
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
    const key = `${replica.label}\u0000${replica.url}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      pool = new Pool(new URL(replica.url).origin, {
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
    let base = this.#bases.get(replica.url);
    if (base === undefined) {
      base = new URL(replica.url).pathname.replace(/\/+$/, '');
      this.#bases.set(replica.url, base);
    }
    return `${base}${path}`;
  }

  /**
   * Streams from the engine in every mode — engines notice a closed stream and stop generating, and
   * do not notice a closed non-streaming request — and folds the stream into the completion, so a
   * cancelled job stops the GPU whatever its mode. The caller's `onChunk` sees each chunk.
   */
  chat(replica: ReplicaTarget, call: ChatCall): Promise<ChatCompletion> {
    const body = JSON.stringify({ ...call.body, stream: true, stream_options: { include_usage: true } });
    return new Promise((resolve, reject) => {
      this.#pool(replica).dispatch(
        {
          method: 'POST',
          path: this.#path(replica, '/v1/chat/completions'),
          headers: {
            ...call.headers,
            'content-type': 'application/json',
            accept: 'text/event-stream',
            ...(replica.apiKey ? { authorization: `Bearer ${replica.apiKey}` } : {}),
          },
          body,
        },
        new ChatStreamCall(replica, call, resolve, reject),
      );
    });
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
