import type { ChatChunk } from '../types.js';

interface Calls {
  /** Where an engine index goes now, once a new call took it over. */
  moved: Map<number, number>;
  /** Each place's call id, once one came. */
  ids: Array<string | undefined>;
  /** One past the highest place taken. */
  count: number;
}

/**
 * Numbers a stream's tool calls as OpenAI does, 0, 1, 2 … a choice, where an engine numbers every
 * call of a parallel set 0: Ollama streams each call whole, each with its own `id`, all at `index` 0
 * (ollama/ollama#15457), and a client that rebuilds the calls from the deltas (the `openai`
 * package's stream helper, the AI SDK) joins them into one call with broken arguments. A new `id`
 * at an index another call holds starts the next call; deltas without an `id` go on with the call
 * their index reached last. An engine that numbers its calls itself is left as it is.
 */
export class ToolCallNumbering {
  readonly #choices = new Map<number, Calls>();

  /** Renumbers `chunk`'s tool calls in place; true when an index changed. */
  renumber(chunk: ChatChunk): boolean {
    let changed = false;
    for (const choice of chunk.choices) {
      const calls = choice?.delta?.tool_calls as Array<{ index?: unknown; id?: unknown }> | undefined;
      if (!Array.isArray(calls)) continue;
      let state = this.#choices.get(choice.index);
      if (!state) {
        state = { moved: new Map(), ids: [], count: 0 };
        this.#choices.set(choice.index, state);
      }
      for (const call of calls) {
        if (typeof call?.index !== 'number') continue;
        let place = state.moved.get(call.index) ?? call.index;
        const id = typeof call.id === 'string' && call.id !== '' ? call.id : undefined;
        const held = state.ids[place];
        if (held !== undefined && id !== undefined && id !== held) {
          place = state.count;
          state.moved.set(call.index, place);
        }
        if (id !== undefined) state.ids[place] = id;
        state.count = Math.max(state.count, place + 1);
        if (place !== call.index) {
          call.index = place;
          changed = true;
        }
      }
    }
    return changed;
  }
}
