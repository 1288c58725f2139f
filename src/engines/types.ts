/** What the router and the chat kind know of an engine: a small interface every adapter implements. */

export interface ChatMessage {
  role: string;
  content?: unknown;
  [field: string]: unknown;
}

/** The `chat.completion` object (OpenAI wire shape). */
export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{ index: number; message: ChatMessage; finish_reason: string | null; logprobs?: unknown }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number; [k: string]: unknown };
  [field: string]: unknown;
}

/** A `chat.completion.chunk` (OpenAI wire shape). */
export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: Record<string, unknown>;
    finish_reason: string | null;
    logprobs?: unknown;
  }>;
  usage?: ChatCompletion['usage'] | null;
  [field: string]: unknown;
}

/** One upstream endpoint of a pool. */
export interface ReplicaTarget {
  readonly url: string;
  /** Names the replica in error messages that reach callers, without revealing its address. */
  readonly label: string;
  readonly apiKey: string | undefined;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly maxConcurrency: number;
  readonly healthPath: string;
}

/** How a content string opens in a chunk's JSON text, written compactly. */
export const CONTENT_KEY = '"content":"';

/**
 * The content chunks of a stream that repeat one chunk but for their content string: the engine's
 * JSON text is `before`, the string's body, then `after` (engines/openai/chunk-shape.ts).
 */
export interface ContentShape {
  /** The chunk they repeat, as parsed. */
  readonly like: ChatChunk;
  /** The JSON text up to and including the content string's opening quote: it ends in CONTENT_KEY. */
  readonly before: string;
  /** The JSON text from the content string's closing quote to the end. */
  readonly after: string;
  /** A chunk of this shape with `content`. */
  chunk(content: string): ChatChunk;
}

export interface ChatCall {
  /** The body to send, model already the engine's own name. */
  body: Record<string, unknown>;
  signal: AbortSignal;
  /** Set for a stream: called with each chunk as it arrives, and the JSON text the engine sent for it. */
  onChunk?: (chunk: ChatChunk, text: string) => void;
  /**
   * Set for a stream that needs only the text of most chunks: a content chunk that repeats another
   * (one `onChunk` had) but for its content comes here, as its content, the content's JSON text (what
   * stands between the string's quotes) and the shape the chunks share, with no object made for it.
   * Without it, such chunks go to `onChunk` too.
   */
  onContent?: (content: string, body: string, shape: ContentShape) => void;
  /** Called once, when the engine's first chunk arrives (its prefill is done), in every mode. */
  onFirstChunk?: () => void;
  /** Headers the request carries besides the adapter's own: the W3C trace context. */
  headers?: Readonly<Record<string, string>>;
}

/**
 * An engine failure. `beforeOutput` failures (refused connection, 5xx or timeout before any token)
 * may be retried on another replica; anything after the first token may not.
 */
export class EngineError extends Error {
  constructor(
    message: string,
    readonly kind: 'unavailable' | 'timeout' | 'rejected' | 'broken',
    readonly beforeOutput: boolean,
    readonly status?: number,
    /** Set when the engine refused the prompt as longer than its context. */
    readonly contextLength = false,
    /** The engine's own error fields besides its message (`type`, `param`, `n_ctx`, …), for a 4xx. */
    readonly engineFields: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'EngineError';
  }

  /** What a trace records of it: `engine-` and its kind (`engine-timeout`, `engine-broken`). */
  get code(): string {
    return `engine-${this.kind}`;
  }

  /** Worth trying another replica: the engine, not the request, was at fault, and nothing was sent yet. */
  get retryable(): boolean {
    return this.beforeOutput && this.kind !== 'rejected';
  }
}

/** What an engine says about itself for routing; each field only where the engine exposes it. */
export interface EngineProbe {
  /** Requests running plus waiting, every client of the engine together. */
  load?: number;
  /** KV cache capacity in tokens. */
  kvCapacityTokens?: number;
  /** A counter that only grows while the engine process lives: a drop means it restarted. */
  lifetimeCounter?: number;
}

/** What an engine says about the model it serves; each field only where the engine says it. */
export interface ModelTraits {
  /** Longest prompt plus output a request may use. */
  contextTokens?: number;
  /** Whether the model reads images (llama.cpp: whether it was started with a projector). */
  vision?: boolean;
}

export interface EngineAdapter {
  readonly capabilities: {
    readonly streaming: boolean;
    readonly cancel: boolean;
    readonly prefixCache: boolean;
    /** `probe`, `describe` and `countTokens` ask the engine. */
    readonly introspection: boolean;
  };
  chat(replica: ReplicaTarget, call: ChatCall): Promise<ChatCompletion>;
  /** True when the replica answers its health probe within `timeoutMs`. */
  healthy(replica: ReplicaTarget, timeoutMs: number): Promise<boolean>;
  /** Load, KV capacity and restarts from the engine's metrics; empty when it exposes none. */
  probe(replica: ReplicaTarget, timeoutMs: number): Promise<EngineProbe>;
  /** What the replica serves `model` (its own name for it) with, as far as the engine says. */
  describe(replica: ReplicaTarget, model: string, timeoutMs: number): Promise<ModelTraits>;
  /** The prompt's exact size in the engine's tokens, when the engine can count them. */
  countTokens(
    replica: ReplicaTarget,
    model: string,
    messages: readonly ChatMessage[],
    timeoutMs: number,
  ): Promise<number | undefined>;
  close(): Promise<void>;
}
