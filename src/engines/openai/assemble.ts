import { StreamedText } from '../streamed-text.js';
import type { ChatChunk, ChatCompletion, ChatMessage } from '../types.js';

interface ToolCallDelta {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

interface ChoiceState {
  /** `content` stays null here while the answer streams: its text is `text` until `result()`. */
  message: ChatMessage & { content: string | null };
  /** The content so far; undefined until a chunk carries content (a tool call alone has null). */
  text: StreamedText | undefined;
  /** The other text fields (TEXT_FIELDS) so far, by name; `message` holds '' for each until `result()`. */
  texts: Map<string, StreamedText>;
  finish_reason: string | null;
  /** Tool calls by index; each one's `function.arguments` stays '' here until `result()`. */
  tools: ToolCallDelta[];
  /** Each tool call's arguments so far, by the call's index. */
  toolArgs: StreamedText[];
  /** `logprobs.content` (and `refusal`) entries, in order; null until a chunk carries logprobs. */
  logprobs: { content: unknown[]; refusal: unknown[] } | null;
  /** Other per-choice fields an engine sends (`stop_reason`, …), last value wins. */
  extra: Record<string, unknown>;
}

/** A choice's content: its text, or null for one that made only tool calls or a refusal and no text. */
function contentOf(text: StreamedText | undefined, otherwise: boolean): string | null {
  const content = text?.toString() ?? '';
  return content === '' && otherwise ? null : content;
}

/** Delta fields that are text to concatenate, beyond `content`: reasoning models' and refusals. */
const TEXT_FIELDS: ReadonlySet<string> = new Set(['reasoning_content', 'reasoning', 'refusal']);
const CHUNK_ONLY = new Set(['id', 'object', 'created', 'model', 'choices', 'usage']);
const CHOICE_ONLY = new Set(['index', 'delta', 'finish_reason', 'logprobs']);

/**
 * Folds stream chunks into the `chat.completion` a non-stream call would have answered, keeping
 * every field the engine sent: every choice (n > 1), tool calls, logprobs, reasoning content,
 * refusals, `system_fingerprint`, usage with its details, llama.cpp's `timings`.
 */
export class CompletionAssembler {
  #id = '';
  #created = 0;
  #model = '';
  #usage: ChatCompletion['usage'];
  /** Top-level fields beyond the chunk's own (`system_fingerprint`, `timings`, …), last value wins. */
  readonly #extra: Record<string, unknown> = {};
  readonly #choices = new Map<number, ChoiceState>();

  add(chunk: ChatChunk): void {
    this.#id ||= chunk.id;
    this.#created ||= chunk.created;
    this.#model ||= chunk.model;
    if (chunk.usage) this.#usage = chunk.usage;
    // for…in rather than Object.entries: this runs for every chunk of every answer.
    for (const key in chunk) {
      const value = chunk[key];
      if (value !== undefined && !CHUNK_ONLY.has(key)) this.#extra[key] = value;
    }
    for (const choice of chunk.choices ?? []) this.#addChoice(choice);
  }

  /**
   * A chunk that repeats one added before but for its content (a ContentChunkShape's): only the
   * content is new, so only the content is added.
   */
  addContent(index: number, content: string): void {
    this.#text(this.#choice(index)).add(content);
  }

  #text(state: ChoiceState): StreamedText {
    state.text ??= new StreamedText();
    return state.text;
  }

  #textField(state: ChoiceState, key: string): StreamedText {
    let text = state.texts.get(key);
    if (!text) {
      text = new StreamedText();
      state.texts.set(key, text);
      // Its place among the message's fields, in the order the engine sent them.
      state.message[key] = '';
    }
    return text;
  }

  #choice(index: number): ChoiceState {
    let state = this.#choices.get(index);
    if (!state) {
      state = {
        // `refusal` null unless one streams: OpenAI's message always has the field.
        message: { role: 'assistant', content: null, refusal: null },
        text: undefined,
        texts: new Map(),
        finish_reason: null,
        tools: [],
        toolArgs: [],
        logprobs: null,
        extra: {},
      };
      this.#choices.set(index, state);
    }
    return state;
  }

  #addChoice(choice: ChatChunk['choices'][number]): void {
    const state = this.#choice(choice.index);
    const delta = choice.delta ?? {};
    for (const key in delta) {
      const value = delta[key];
      if (key === 'role' && typeof value === 'string') state.message.role = value;
      else if (key === 'content') {
        if (typeof value === 'string') this.#text(state).add(value);
      } else if (TEXT_FIELDS.has(key)) {
        if (typeof value === 'string') this.#textField(state, key).add(value);
      } else if (key === 'tool_calls') this.#addToolCalls(state, value as ToolCallDelta[] | undefined);
      else if (value !== undefined && value !== null) state.message[key] = value;
    }
    const logprobs = choice.logprobs as { content?: unknown; refusal?: unknown } | null | undefined;
    if (logprobs) {
      state.logprobs ??= { content: [], refusal: [] };
      if (Array.isArray(logprobs.content)) state.logprobs.content.push(...logprobs.content);
      if (Array.isArray(logprobs.refusal)) state.logprobs.refusal.push(...logprobs.refusal);
    }
    for (const key in choice) {
      const value = (choice as Record<string, unknown>)[key];
      if (value !== undefined && !CHOICE_ONLY.has(key)) state.extra[key] = value;
    }
    if (choice.finish_reason) state.finish_reason = choice.finish_reason;
  }

  #addToolCalls(state: ChoiceState, calls: ToolCallDelta[] | undefined): void {
    for (const call of calls ?? []) {
      // Numbered 0, 1, 2 … already, where the engine did not (ToolCallNumbering).
      const { index } = call;
      let into = state.tools[index];
      if (!into) {
        into = { index, function: { name: '', arguments: '' } };
        state.tools[index] = into;
      }
      if (call.id) into.id = call.id;
      if (call.type) into.type = call.type;
      if (call.function?.name) (into.function as { name: string }).name += call.function.name;
      if (call.function?.arguments) {
        state.toolArgs[index] ??= new StreamedText();
        (state.toolArgs[index] as StreamedText).add(call.function.arguments);
      }
    }
  }

  result(): ChatCompletion {
    return {
      id: this.#id,
      object: 'chat.completion',
      created: this.#created,
      model: this.#model,
      choices: [...this.#choices.entries()]
        .sort(([a], [b]) => a - b)
        .map(([index, { message, text, texts, finish_reason, tools, toolArgs, logprobs, extra }]) => ({
          index,
          message: {
            ...message,
            ...Object.fromEntries([...texts].map(([key, value]) => [key, value.toString()])),
            // A choice that produced no text (only tool calls, or a refusal) has null content, as
            // non-streams answer, also when its engine streamed an empty `content` first (vLLM's).
            content: contentOf(text, tools.length > 0 || texts.has('refusal')),
            ...(tools.length
              ? {
                  tool_calls: tools.map(({ index: i, ...call }) => ({
                    type: 'function',
                    ...call,
                    function: { ...call.function, arguments: toolArgs[i]?.toString() ?? '' },
                  })),
                }
              : {}),
          },
          finish_reason,
          logprobs: logprobs
            ? { content: logprobs.content, refusal: logprobs.refusal.length ? logprobs.refusal : null }
            : null,
          ...extra,
        })),
      ...(this.#usage ? { usage: this.#usage } : {}),
      ...this.#extra,
    };
  }
}

/**
 * A whole completion as the chunks a stream of it would have carried: one a choice, its message as
 * the delta (each tool call numbered, as streamed tool calls are) with its finish reason, then the
 * usage chunk. For a stream caller whose engine ignored `stream: true` and answered at once.
 */
export function chunksOf(completion: ChatCompletion): ChatChunk[] {
  const { choices, usage, object: _object, ...fields } = completion;
  const chunk = (extra: Pick<ChatChunk, 'choices'> & { usage?: ChatChunk['usage'] }): ChatChunk => ({
    ...fields,
    object: 'chat.completion.chunk',
    ...extra,
  });
  const chunks = (Array.isArray(choices) ? choices : []).map((choice) => {
    const { tool_calls, ...message } = choice.message ?? { role: 'assistant' };
    const delta = Array.isArray(tool_calls)
      ? { ...message, tool_calls: tool_calls.map((call: object, index: number) => ({ index, ...call })) }
      : message;
    return chunk({
      choices: [
        {
          index: choice.index,
          delta,
          logprobs: choice.logprobs ?? null,
          finish_reason: choice.finish_reason,
        },
      ],
    });
  });
  if (usage) chunks.push(chunk({ choices: [], usage }));
  return chunks;
}
