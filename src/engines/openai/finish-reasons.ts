import type { ChatChunk, ChatCompletion } from '../types.js';

/**
 * The finish reasons a stream owes its choices. Some engines end a clean stream (`[DONE]`) without
 * ever sending a choice's `finish_reason`, and the `openai` package's stream helper
 * (`finalChatCompletion`, `runTools`) then throws on that choice. Each choice that streamed
 * something and got no finish reason is closed, at the end, with a chunk of its own: an empty
 * delta and `"tool_calls"` when the choice streamed tool calls (OpenAI ends such a turn so, and
 * agent loops go on by it), `"stop"` otherwise. A finish reason the engine sent is left as it is.
 */
export class FinishReasons {
  /** Each choice that streamed, by index: whether it got a finish reason, whether it made calls. */
  readonly #choices = new Map<number, { finished: boolean; calls: boolean }>();
  #unfinished = 0;
  #like: Pick<ChatChunk, 'id' | 'created' | 'model'> | undefined;

  /** Notes what `chunk` says of its choices. */
  note(chunk: ChatChunk): void {
    if (chunk.choices.length === 0) return;
    this.#like ??= { id: chunk.id, created: chunk.created, model: chunk.model };
    for (const choice of chunk.choices) {
      let state = this.#choices.get(choice.index);
      if (!state) {
        state = { finished: false, calls: false };
        this.#choices.set(choice.index, state);
        this.#unfinished++;
      }
      const calls = choice.delta?.tool_calls;
      if (Array.isArray(calls) && calls.length > 0) state.calls = true;
      if (choice.finish_reason && !state.finished) {
        state.finished = true;
        this.#unfinished--;
      }
    }
  }

  /** Whether a choice that streamed has no finish reason yet. */
  get owed(): boolean {
    return this.#unfinished > 0;
  }

  /**
   * The chunks that finish each choice still unfinished, in the order of their indices, with the
   * stream's id, created and model; none once every choice is finished. For a stream that ended
   * cleanly only: one cut short is an error, not an end.
   */
  closing(): ChatChunk[] {
    const like = this.#like;
    if (!like || !this.owed) return [];
    const chunks: ChatChunk[] = [];
    for (const [index, state] of [...this.#choices].sort(([a], [b]) => a - b)) {
      if (state.finished) continue;
      state.finished = true;
      chunks.push({
        id: like.id,
        object: 'chat.completion.chunk',
        created: like.created,
        model: like.model,
        choices: [{ index, delta: {}, logprobs: null, finish_reason: state.calls ? 'tool_calls' : 'stop' }],
      });
    }
    this.#unfinished = 0;
    return chunks;
  }
}

/**
 * A whole answer (an engine that ignored `stream: true`) with a finish reason on each choice, as a
 * stream's choices are closed above: where the engine gave none, `"tool_calls"` for a message that
 * made calls, `"stop"` otherwise.
 */
export function finishWhole(completion: ChatCompletion): ChatCompletion {
  if (!Array.isArray(completion.choices)) return completion;
  for (const choice of completion.choices) {
    if (!choice || typeof choice !== 'object' || choice.finish_reason) continue;
    const calls = choice.message?.tool_calls;
    choice.finish_reason = Array.isArray(calls) && calls.length > 0 ? 'tool_calls' : 'stop';
  }
  return completion;
}
