import {
  type ChatChunk,
  type ChatCompletion,
  type ChatMessage,
  CONTENT_KEY,
  type ContentShape,
} from '../engines/types.js';
import { JobFailure, type JobKind, type RunContext } from '../jobs/kinds.js';
import { tokenMeter } from '../limits/meter.js';
import { EngineError, type Route, type RouteCall, type Router } from '../router/index.js';
import type { Store } from '../store/index.js';
import { type ImageFetching, inlineMessageImages } from './images.js';
import type { ChatJobRequest } from './schema.js';
import { ledgerUnits } from './usage.js';

export interface ChatDeps {
  /** The router in force: a reload swaps it between requests. */
  router(): Router;
  store: Store;
  /** How Kiln fetches the messages' `https://` images itself, so that no engine dials them. */
  images: ImageFetching;
}

/** Persona preamble, then contexts (persona's, then the request's), then the caller's messages. */
export async function preamble(
  store: Store,
  orgId: string,
  request: ChatJobRequest,
  router: Router,
): Promise<ChatMessage[]> {
  const persona = router.resolve(request.model)?.persona;
  const messages: ChatMessage[] = [];
  if (persona?.system) messages.push({ role: 'system', content: persona.system });
  for (const name of new Set([...(persona?.contexts ?? []), ...request.contexts])) {
    const context = await store.contexts.get(orgId, name);
    if (!context)
      throw new JobFailure('inference-failed', `context '${name}' no longer exists in this organisation`);
    messages.push({ role: 'system', content: context.content });
  }
  return messages;
}

/**
 * The engine's failure, as the job's: its 4xx (and llama.cpp's 500 for media its model cannot
 * read) is the caller's error (`engine-rejected`, with the engine's own fields), running out of
 * time `engine-timeout`, a fleet that is down `engine-unavailable`.
 */
function asJobFailure(error: EngineError): JobFailure {
  if (error.kind === 'rejected') {
    return new JobFailure('engine-rejected', error.message, {
      engine_error: { status: error.status, ...error.engineFields },
    });
  }
  // Out of time is the engine's failure (DESIGN.md's table): the job's own limits alone end it `timeout`.
  if (error.kind === 'timeout') return new JobFailure('engine-timeout', error.message);
  // Nobody to ask (no replica up, connections refused, 503/429): the fleet is unavailable, not the answer wrong.
  if (
    error.kind === 'unavailable' &&
    (error.status === undefined || error.status === 503 || error.status === 429)
  ) {
    return new JobFailure('engine-unavailable', error.message);
  }
  return new JobFailure('inference-failed', error.message);
}

/**
 * A failure that names messages by their place in what the engine was sent (`messages[3]`: an
 * engine's refusal, where the persona's and the contexts' messages come first; an image that could
 * not be fetched): said instead as `name` calls the caller's own (undefined: left as it was said).
 */
export function renameMessages(failure: unknown, name: (index: number) => string | undefined): unknown {
  if (!(failure instanceof JobFailure)) return failure;
  const shift = (text: string) =>
    text.replace(/\bmessages\[(\d+)\]/g, (whole, n: string) => name(Number(n)) ?? whole);
  let extra: Record<string, unknown>;
  if (failure.code === 'invalid-image-url') {
    const { param } = failure.extra;
    extra = typeof param === 'string' ? { ...failure.extra, param: shift(param) } : failure.extra;
  } else if (failure.code === 'engine-rejected') {
    const engine = failure.extra.engine_error as Record<string, unknown> | undefined;
    const param = typeof engine?.param === 'string' ? { param: shift(engine.param) } : {};
    extra = engine ? { ...failure.extra, engine_error: { ...engine, ...param } } : failure.extra;
  } else return failure;
  return new JobFailure(failure.code, shift(failure.message), extra);
}

/**
 * A job's chat call through the router: its route recorded when it is chosen, and again with the
 * cached tokens the engine reported; an engine's failure thrown as the job's.
 */
export async function chatThroughRouter(
  job: Pick<RunContext<unknown>, 'record'>,
  router: Router,
  call: Omit<RouteCall, 'onRoute'>,
): Promise<{ completion: ChatCompletion; route: Route }> {
  try {
    const answer = await router.chat({ ...call, onRoute: (route) => void job.record({ route }) });
    if (answer.route.cached_reported !== undefined) await job.record({ route: answer.route });
    return answer;
  } catch (error) {
    throw error instanceof EngineError ? asJobFailure(error) : error;
  }
}

/** A chunk as it goes out: the object, and its JSON text with Kiln's id, model and created. */
interface Outgoing {
  chunk: ChatChunk;
  text: string;
}

/**
 * Puts Kiln's `id`, `model` and `created` into each chunk's JSON text in place of the engine's. Where
 * the engine wrote a field compactly (`"id":"…"`, as vLLM, SGLang, llama.cpp and Ollama do), the
 * value is swapped in the text; otherwise the chunk is serialised again.
 */
export class ChunkRenamer {
  readonly #fields: ReadonlyArray<{
    key: 'id' | 'model' | 'created';
    value: string;
    old?: unknown;
    pattern?: string;
  }>;
  readonly #renamed: Pick<ChatChunk, 'id' | 'model' | 'created'>;
  /** The engine's text up to its last renamed field in the last chunk renamed in place, and Kiln's. */
  #opening: ({ engine: string; kiln: string } & Pick<ChatChunk, 'id' | 'model' | 'created'>) | undefined;

  constructor(id: string, model: string, created: number) {
    this.#renamed = { id, model, created };
    this.#fields = [
      { key: 'id', value: JSON.stringify(id) },
      { key: 'created', value: String(created) },
      { key: 'model', value: JSON.stringify(model) },
    ];
  }

  text(chunk: ChatChunk, text: string): string {
    return this.#inPlace(chunk, text) ?? this.serialise(chunk);
  }

  /**
   * Kiln's text around the content string of every chunk of `shape`: the engine's, renamed in place
   * once for the shape. Undefined where it cannot be renamed in place, or the shape's text before the
   * string does not end in its key as compact JSON writes it.
   */
  around(shape: ContentShape): { before: string; after: string } | undefined {
    // The shape's text with an empty content string: still the shape's only content key, as Kiln's
    // values are a JSON string and a number.
    if (!shape.before.endsWith(CONTENT_KEY)) return undefined;
    const renamed = this.#inPlace(shape.like, shape.before + shape.after);
    if (renamed === undefined) return undefined;
    const at = renamed.indexOf(CONTENT_KEY) + CONTENT_KEY.length;
    return { before: renamed.slice(0, at), after: renamed.slice(at) };
  }

  /** `text` with Kiln's values in place of the engine's; undefined when it must be serialised again. */
  #inPlace(chunk: ChatChunk, text: string): string | undefined {
    // An event's data spread over several lines (valid SSE) has line breaks in its JSON: those must
    // not reach the caller's `data:` line.
    if (text.includes('\n') || text.includes('\r')) return undefined;
    // Engines that write the three fields first (vLLM, SGLang) repeat the same opening bytes in
    // every chunk: once it was renamed, it is swapped whole.
    const known = this.#opening;
    if (
      known !== undefined &&
      // A slice and ===, not startsWith: see ContentChunkShape.read.
      text.slice(0, known.engine.length) === known.engine &&
      chunk.id === known.id &&
      chunk.created === known.created &&
      chunk.model === known.model
    )
      return known.kiln + text.slice(known.engine.length);
    const spots: Array<{ at: number; keep: number; skip: number; value: string }> = [];
    for (const field of this.#fields) {
      // An engine sends the same values in every chunk of a stream: the pattern is made once.
      if (field.pattern === undefined || chunk[field.key] !== field.old) {
        field.old = chunk[field.key];
        field.pattern = `"${field.key}":${JSON.stringify(field.old)}`;
      }
      const at = text.indexOf(field.pattern);
      // The field's whole value, followed by `,` or `}`, and nowhere else (a nested field with the
      // same value could come first): anything else is not certainly the chunk's own field.
      const after = at === -1 ? -1 : text.charCodeAt(at + field.pattern.length);
      if ((after !== 0x2c && after !== 0x7d) || text.includes(field.pattern, at + 1)) return undefined;
      spots.push({
        at,
        keep: at + field.key.length + 3,
        skip: at + field.pattern.length,
        value: field.value,
      });
    }
    spots.sort((a, b) => a.at - b.at);
    let out = '';
    let from = 0;
    for (const spot of spots) {
      out += text.slice(from, spot.keep) + spot.value;
      from = spot.skip;
    }
    const engine = text.slice(0, from);
    // Fields after the choices (llama.cpp) leave nothing that later chunks share.
    this.#opening = engine.includes('[')
      ? undefined
      : { engine, kiln: out, id: chunk.id, created: chunk.created, model: chunk.model };
    return out + text.slice(from);
  }

  serialise(chunk: ChatChunk): string {
    return JSON.stringify({ ...chunk, ...this.#renamed });
  }
}

/**
 * What a stream's caller sees of the engine's chunks. Kiln always asks engines for the usage chunk;
 * a caller that did not ask gets none, and the usage chunk's `timings` (llama.cpp) move onto the
 * chunk with the finish reason, where llama.cpp puts them for such a caller. Each choice's first
 * delta carries `role: "assistant"`, as OpenAI's does, also where the engine left it out (llama.cpp
 * sometimes starts with content: recordings/llamacpp, chat-stream-include-usage.json), which the
 * `openai` client's stream helper refuses ("missing role for choice 0").
 */
export class ChunkRelay {
  #held: Outgoing | undefined;
  #shape: ContentShape | undefined;
  #around: { before: string; after: string } | undefined;
  /** The choices whose first delta went out. */
  readonly #begun = new Set<number>();

  constructor(
    private readonly includeUsage: boolean,
    private readonly renamer: ChunkRenamer,
    private readonly send: (text: string) => void,
  ) {}

  add(chunk: ChatChunk, text: string): void {
    const usageOnly = chunk.choices.length === 0;
    if (usageOnly && !this.includeUsage) {
      if (this.#held && chunk.timings !== undefined) {
        const withTimings = { ...this.#held.chunk, timings: chunk.timings };
        this.#held = { chunk: withTimings, text: this.renamer.serialise(withTimings) };
      }
      return;
    }
    this.end();
    const withRole = this.#withRole(chunk);
    const out = withRole ?? chunk;
    const outgoing = {
      chunk: out,
      text: this.#withUsage(
        out,
        withRole ? this.renamer.serialise(withRole) : this.renamer.text(chunk, text),
      ),
    };
    // The finish chunk waits for the usage chunk that follows it.
    if (!this.includeUsage && chunk.choices.some((c) => c.finish_reason)) this.#held = outgoing;
    else this.send(outgoing.text);
  }

  /** `chunk` with a role on the first delta of each choice that had none; undefined when none lacks it. */
  #withRole(chunk: ChatChunk): ChatChunk | undefined {
    const lacking = new Set<number>();
    for (const choice of chunk.choices) {
      if (this.#begun.has(choice.index)) continue;
      this.#begun.add(choice.index);
      if (choice.delta?.role === undefined) lacking.add(choice.index);
    }
    if (lacking.size === 0) return undefined;
    return {
      ...chunk,
      choices: chunk.choices.map((choice) =>
        lacking.has(choice.index) ? { ...choice, delta: { role: 'assistant', ...choice.delta } } : choice,
      ),
    };
  }

  /**
   * A content chunk of `shape`: it finishes nothing, so it goes at once, its content's JSON text
   * between Kiln's text around it, worked out once for the shape.
   */
  content(shape: ContentShape, content: string, body: string): void {
    this.end();
    if (shape !== this.#shape) {
      this.#shape = shape;
      const around = this.renamer.around(shape);
      this.#around = around && { before: around.before, after: this.#withUsage(shape.like, around.after) };
    }
    const around = this.#around;
    if (around) this.send(around.before + body + around.after);
    else {
      const chunk = shape.chunk(content);
      this.send(this.#withUsage(chunk, this.renamer.serialise(chunk)));
    }
  }

  /**
   * A chunk's JSON text (or its end) with `"usage":null` before its closing brace, where the caller
   * asked for usage and the engine sent the chunk without the field: OpenAI's chunks carry it, null
   * but in the usage chunk (vLLM and llama.cpp leave it out).
   */
  #withUsage(chunk: ChatChunk, text: string): string {
    if (!this.includeUsage || chunk.usage !== undefined) return text;
    const end = text.lastIndexOf('}');
    return `${text.slice(0, end)},"usage":null${text.slice(end)}`;
  }

  end(): void {
    if (this.#held) this.send(this.#held.text);
    this.#held = undefined;
  }
}

/** Two names of one limit: a caller's value under either replaces a persona's default under both. */
const OUTPUT_LIMITS = ['max_tokens', 'max_completion_tokens'];

/**
 * The caller's body over a persona's defaults. A null is no value (OpenAI's optional fields take
 * null for "not set"): the persona's default stands where the caller sent one. `max_tokens` and
 * `max_completion_tokens` are one limit: engines that take both obey the second, so a default of
 * one must not outrank the caller's other.
 */
export function withDefaults(
  defaults: Record<string, unknown> | undefined,
  given: Record<string, unknown>,
): Record<string, unknown> {
  if (!defaults) return given;
  const limited = OUTPUT_LIMITS.some((key) => given[key] !== undefined && given[key] !== null);
  // Copied key by key rather than `delete`d: an object V8 keeps fast on its way to the engine.
  const body: Record<string, unknown> = {};
  for (const key in defaults) if (!(limited && OUTPUT_LIMITS.includes(key))) body[key] = defaults[key];
  for (const key in given) if (given[key] !== null || !(key in defaults)) body[key] = given[key];
  return body;
}

/** Chat completions as a job kind: every mode runs here, through the router. */
export function chatKind(deps: ChatDeps): JobKind<ChatJobRequest> {
  return {
    name: 'chat',
    idPrefix: 'chatcmpl-',
    submissionObject: 'chat.completion.async',
    pollingBase: '/api/v1/jobs/',
    queueTtlMs: 10 * 60_000,
    runLimitMs: 30 * 60_000,
    meter: tokenMeter(
      (r) => r.body.messages,
      (r) => ({ max: r.body.max_completion_tokens ?? r.body.max_tokens ?? r.personaMaxTokens, n: r.body.n }),
      (r) => r.preambleChars ?? 0,
    ),
    async run(job, signal) {
      const router = deps.router();
      const model = router.resolve(job.request.model);
      if (!model)
        throw new JobFailure('inference-failed', `no persona or served model named ${job.request.model}`);
      const before = await preamble(deps.store, job.orgId, job.request, router);
      const messages = [
        ...before,
        ...(await inlineMessageImages(job.request.body.messages as ChatMessage[], deps.images, signal)),
      ];
      // Without the messages, by destructuring: `delete` would leave an object V8 keeps as a
      // dictionary, slow in every later spread and read of it on the way to the engine.
      const { messages: _messages, ...body } = withDefaults(model.persona?.defaults, job.request.body);
      const created = Math.floor(Date.now() / 1000);
      const renamer = new ChunkRenamer(job.publicId, job.request.model, created);
      const relay = new ChunkRelay(job.request.includeUsage, renamer, (text) => job.publish(text));
      const { completion } = await chatThroughRouter(job, router, {
        model,
        messages,
        body,
        signal,
        org: job.orgId,
        ...(job.mode === 'stream'
          ? {
              onChunk: (chunk: ChatChunk, text: string) => relay.add(chunk, text),
              onContent: (content: string, body: string, shape: ContentShape) =>
                relay.content(shape, content, body),
            }
          : {}),
      }).catch((failure: unknown) => {
        const own = before.length;
        throw renameMessages(failure, (n) => (n >= own ? `messages[${n - own}]` : undefined));
      });
      relay.end();
      return {
        // Always a chat.completion: an engine that answered at once may have named it otherwise.
        result: {
          ...completion,
          object: 'chat.completion',
          id: job.publicId,
          model: job.request.model,
          created,
        },
        usage: ledgerUnits(completion, messages),
      };
    },
  };
}
