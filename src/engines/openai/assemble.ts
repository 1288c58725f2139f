import type { ChatChunk, ChatCompletion, ChatMessage } from '../types.js';

interface ToolCallDelta {
  index: number;
  id?: string;
  type?: string;
  function?: { name?: string; arguments?: string };
}

/** Folds stream chunks into the `chat.completion` a non-stream call would have answered. */
export class CompletionAssembler {
  #id = '';
  #created = 0;
  #model = '';
  #usage: ChatCompletion['usage'];
  readonly #choices = new Map<
    number,
    { message: ChatMessage & { content: string }; finish_reason: string | null; tools: ToolCallDelta[] }
  >();

  add(chunk: ChatChunk): void {
    this.#id ||= chunk.id;
    this.#created ||= chunk.created;
    this.#model ||= chunk.model;
    if (chunk.usage) this.#usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      let state = this.#choices.get(choice.index);
      if (!state) {
        state = { message: { role: 'assistant', content: '' }, finish_reason: null, tools: [] };
        this.#choices.set(choice.index, state);
      }
      const delta = choice.delta ?? {};
      if (typeof delta.role === 'string') state.message.role = delta.role;
      if (typeof delta.content === 'string') state.message.content += delta.content;
      for (const call of (delta.tool_calls as ToolCallDelta[] | undefined) ?? []) {
        let into = state.tools[call.index];
        if (!into) {
          into = { index: call.index, function: { name: '', arguments: '' } };
          state.tools[call.index] = into;
        }
        if (call.id) into.id = call.id;
        if (call.type) into.type = call.type;
        if (call.function?.name) (into.function as { name: string }).name += call.function.name;
        if (call.function?.arguments)
          (into.function as { arguments: string }).arguments += call.function.arguments;
      }
      if (choice.finish_reason) state.finish_reason = choice.finish_reason;
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
        .map(([index, { message, finish_reason, tools }]) => ({
          index,
          message: tools.length
            ? {
                ...message,
                tool_calls: tools.map(({ index: _i, ...call }) => ({ type: 'function', ...call })),
              }
            : message,
          finish_reason,
          logprobs: null,
        })),
      ...(this.#usage ? { usage: this.#usage } : {}),
    };
  }
}
