import type { SimStats } from './engine.js';
import type {
  ChatRequest,
  ChoiceOutcome,
  Completion,
  RunFigures,
  SimError,
  StreamWriter,
} from './protocol.js';
import type { ToolDialect } from './tools.js';

/**
 * The engine a simulator imitates on the wire. Everything that differs between vLLM and
 * llama.cpp's llama-server — error envelopes, body and chunk shapes, usage, which routes exist and
 * what they answer — sits behind this interface, so the engine model (batching, cache, timing)
 * and the HTTP plumbing stay one.
 */
export type FlavorName = 'vllm' | 'llama.cpp';

export const FLAVORS: readonly FlavorName[] = ['vllm', 'llama.cpp'];

/** What a flavor's own routes may read of the replica. */
export interface ReplicaInfo {
  model: string;
  contextWindow: number;
  maxSequences: number;
  kvBlocks: number;
  blockTokens: number;
  vision: boolean;
  prefillMsPerToken: number;
  decodeMsPerToken: number;
  stats(): SimStats;
  slots(): readonly SlotView[];
  resetPrefixCache(): void;
}

/** One sequence slot as llama.cpp's /slots shows it. */
export interface SlotView {
  id: number;
  processing: boolean;
  /** The task last run in the slot (-1: none yet). */
  taskId: number;
  promptTokens: number;
  promptProcessed: number;
  promptCached: number;
  /** Output tokens decoded so far (0 when idle). */
  decoded: number;
  /** The output tokens asked for (max over choices). */
  outputTokens: number;
  stream: boolean;
}

/** A flavor's answer to a route: a JSON body (null: an empty one), or text with its content type. */
export type RouteAnswer =
  | { status: number; json: unknown }
  | { status: number; text: string; contentType: string }
  | SimError;

/** One of a flavor's routes beyond chat completions and the simulator's own /sim/fault. */
export interface FlavorRoute {
  method: 'GET' | 'POST';
  /** Whether the route takes a JSON body (read, and refused if it is not JSON, before `answer`). */
  readsBody?: boolean;
  answer(body: unknown, replica: ReplicaInfo): RouteAnswer;
}

export interface Flavor {
  readonly name: FlavorName;
  /** Headers of every answer (llama.cpp names itself in `server`). */
  readonly headers: Readonly<Record<string, string>>;
  readonly jsonContentType: string;
  /** Headers of a stream's answer, its content type included. */
  readonly sseHeaders: Readonly<Record<string, string>>;
  /** The paths chat completions are served on. */
  readonly chatPaths: readonly string[];

  error(status: number, message: string, param?: string | null): SimError;
  /** A path the engine does not serve. */
  unknownRoute(): SimError;
  /** A method a path does not take. */
  wrongMethod(): SimError;
  /** A body that is not JSON. */
  invalidJson(text: string, cause: Error): SimError;
  /** The answer to every request while the model loads (for an engine that answers then). */
  loading(): SimError;

  parseChat(body: unknown, model: { vision: boolean }): ChatRequest | SimError;
  /** How the engine reads and words tool calling. */
  readonly tools: ToolDialect;
  /** vLLM refuses a model it does not serve; llama.cpp answers whatever model is named. */
  checkModel(requested: string | undefined, served: string): SimError | undefined;
  /** The engine's context checks, then the output budget a request that fits gets. */
  budget(
    promptTokens: number,
    request: ChatRequest,
    settings: { contextWindow: number; maxTokensDefault: number },
  ): number | SimError;

  /** A new completion id, in the engine's format. */
  completionId(): string;
  completionBody(c: Completion, outcomes: readonly ChoiceOutcome[], figures: RunFigures): unknown;
  streamWriter(c: Completion, request: ChatRequest): StreamWriter;

  /** Routes by path: health, models, metrics, tokenize and the engine's own. */
  readonly routes: Readonly<Record<string, FlavorRoute>>;
}
