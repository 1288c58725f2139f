import { isContextLengthError } from '../engines/openai/discovery.js';
import type { ChatMessage } from '../engines/types.js';
import { JobFailure } from '../jobs/kinds.js';

/** Whether a run failed because what it sent does not fit the engine's context. */
function overContext(failure: unknown): boolean {
  if (!(failure instanceof JobFailure) || failure.code !== 'engine-rejected') return false;
  const engine = failure.extra.engine_error as { type?: unknown } | undefined;
  return isContextLengthError(`${failure.message} ${String(engine?.type ?? '')}`);
}

/**
 * Where the conversation may be cut, as the index of its first message kept, in the order they are
 * tried: before the second user message (the first turn goes), the third, the fifth, the ninth, …
 * (each try drops about twice the turns of the one before), and last before the newest user message
 * (it alone stays). A conversation is cut only before a user's message and the system messages just
 * before it, never between a call and its output.
 */
export function cuts(messages: readonly ChatMessage[]): number[] {
  const users: number[] = [];
  for (let i = 0; i < messages.length; i++) if (messages[i]?.role === 'user') users.push(i);
  // The opening user message is where the conversation starts already.
  users.shift();
  // A turn's own system messages (a developer item before its user message) go with it: the cut is
  // made before them, never between them and their user message.
  const before = (user: number) => {
    let at = user;
    while (messages[at - 1]?.role === 'system') at--;
    return at;
  };
  const tries: number[] = [];
  for (let k = 1; k <= users.length; k *= 2) tries.push(before(users[k - 1] as number));
  const newest = users.at(-1);
  if (newest !== undefined && tries.at(-1) !== before(newest)) tries.push(before(newest));
  return tries;
}

/**
 * The conversation cut at `from`: its opening system messages (a `developer` or `system` item it
 * began with), which are kept, then its messages from `from` on; and for each message kept, its
 * place in the whole conversation.
 */
export function cut(
  messages: readonly ChatMessage[],
  from: number,
): { kept: ChatMessage[]; origin: (index: number) => number } {
  if (from === 0) return { kept: [...messages], origin: (index) => index };
  let opening = 0;
  while (opening < from && messages[opening]?.role === 'system') opening++;
  return {
    kept: [...messages.slice(0, opening), ...messages.slice(from)],
    origin: (index) => (index < opening ? index : index - opening + from),
  };
}

/**
 * `truncation: "auto"`: `send(0)` sends the whole conversation; where the engine refuses it as longer
 * than its context, the oldest turns go (`send(from)` sends `cut(messages, from)`), as OpenAI drops
 * items from the conversation to fit it, until it fits. Where even the newest turn alone
 * does not fit, or with truncation `disabled`, the engine's refusal stands.
 */
export async function truncating<T>(
  auto: boolean,
  messages: readonly ChatMessage[],
  send: (from: number) => Promise<T>,
): Promise<T> {
  try {
    return await send(0);
  } catch (failure) {
    if (!auto || !overContext(failure)) throw failure;
    let last = failure;
    for (const from of cuts(messages)) {
      try {
        return await send(from);
      } catch (again) {
        if (!overContext(again)) throw again;
        last = again;
      }
    }
    throw last;
  }
}
