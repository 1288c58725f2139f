import type { ChatCompletion, ChatMessage } from '../engines/types.js';
import type { HandlerResult } from '../jobs/kinds.js';
import { CHARS_PER_TOKEN } from '../limits/meter.js';

/**
 * Characters of what messages say: their text (a string, or its `text` parts), their tool calls'
 * names and arguments and their reasoning. Images count none here (a data URL is no text).
 */
function messageChars(messages: readonly ChatMessage[]): number {
  let chars = 0;
  const add = (value: unknown) => {
    if (typeof value === 'string') chars += value.length;
  };
  for (const message of messages) {
    if (Array.isArray(message.content)) {
      for (const part of message.content as { type?: unknown; text?: unknown }[])
        if (part?.type === 'text') add(part.text);
    } else add(message.content);
    add(message.reasoning_content);
    add(message.refusal);
    if (Array.isArray(message.tool_calls)) {
      for (const call of message.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
        add(call?.function?.name);
        add(call?.function?.arguments);
      }
    }
  }
  return chars;
}

const estimated = (messages: readonly ChatMessage[]) => Math.ceil(messageChars(messages) / CHARS_PER_TOKEN);

/**
 * A completion's usage as the ledger's units: the engine's, or where it reported none (a server
 * that does not implement `stream_options` streams no usage chunk) an estimate, four characters a
 * token, of the messages sent and the answer, so that the ledger and every budget still count it.
 */
export function ledgerUnits(
  completion: ChatCompletion,
  sent: readonly ChatMessage[],
): HandlerResult<unknown>['usage'] {
  const { usage } = completion;
  if (usage) return { inputUnits: usage.prompt_tokens, outputUnits: usage.completion_tokens };
  return {
    inputUnits: estimated(sent),
    outputUnits: estimated((completion.choices ?? []).map((choice) => choice.message)),
  };
}
