import type { FinishReason, SimError } from './protocol.js';
import { type ChatMessage, countTokens, tokenize } from './text.js';

/**
 * OpenAI function tool calling as the simulated model does it: whether it calls a tool and which,
 * the arguments it writes, and how a call is decoded token by token. What differs between engines
 * — validation and its errors, call ids, the JSON style of arguments, finish reasons — is a
 * flavor's ToolDialect (vllm-tools.ts, llamacpp-tools.ts); chunk and message shapes are in the
 * flavors' writers.
 */

export interface ToolSpec {
  name: string;
  /** The function's `parameters`, a JSON Schema (or anything: only what it describes is read). */
  parameters: unknown;
}

/** `tool_choice` once read: a named function is `{ name }`. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

export interface ToolSettings {
  tools: ToolSpec[];
  choice: ToolChoice;
}

/** How the call came about: chosen by the model, forced to some tool, or forced to one. */
export type CallMode = 'auto' | 'required' | 'named';

export interface ToolCallOutcome {
  id: string;
  name: string;
  /** The arguments as sent: a JSON text, cut short if max_tokens ended the call. */
  arguments: string;
  mode: CallMode;
}

/** What one decoded token of a call carries in a stream. */
export interface CallStep {
  /** Set on the token that completes the call's name: the stream announces the call there. */
  header: ToolCallOutcome | undefined;
  /** The arguments text this token adds ('' while the name is being written). */
  piece: string;
}

/** An engine's words and rules for tools, behind which the shared model below stays one. */
export interface ToolDialect {
  /** `tools` and `tool_choice`, validated as the engine validates them. */
  parseTools(body: Record<string, unknown>): ToolSettings | SimError;
  /** An assistant message's `tool_calls`, validated, as the chat template renders them. */
  renderCalls(calls: unknown, at: string): string | SimError;
  /** The engine's checks of a `tool` message (`at` is `messages[i]`). */
  checkToolMessage(message: Record<string, unknown>, at: string): SimError | undefined;
  /** A new tool call id, in the engine's format. */
  callId(): string;
  /** The arguments as the engine serialises them. */
  formatArguments(value: Record<string, unknown>): string;
  /** Whether the model writes the function's name (vLLM forces a named choice's name instead). */
  writesName(mode: CallMode): boolean;
  /** The finish reason of a call that ended on its own. */
  finishReason(mode: CallMode): FinishReason;
}

/** How a call is written into the prompt, after the assistant message's content. */
export const renderToolCall = (name: string, args: string): string =>
  `<tool_call>{"name": ${JSON.stringify(name)}, "arguments": ${args}}</tool_call>`;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isWordCharacter = (c: string | undefined) => c !== undefined && /[A-Za-z0-9_]/.test(c);

/** Where `name` first stands as a whole word in `text` (case-sensitive), or -1. */
function mentionAt(text: string, name: string): number {
  if (name === '') return -1;
  for (let at = text.indexOf(name); at >= 0; at = text.indexOf(name, at + 1)) {
    if (!isWordCharacter(text[at - 1]) && !isWordCharacter(text[at + name.length])) return at;
  }
  return -1;
}

/** The tool whose name appears earliest in `text`, if any does. */
function firstNamed(tools: readonly ToolSpec[], text: string): ToolSpec | undefined {
  let found: ToolSpec | undefined;
  let earliest = Number.POSITIVE_INFINITY;
  for (const tool of tools) {
    const at = mentionAt(text, tool.name);
    if (at >= 0 && at < earliest) [found, earliest] = [tool, at];
  }
  return found;
}

/**
 * The word string arguments get: the last capitalised word of `text` that does not begin a
 * sentence (a name, most likely), else its last word, else "value". A word is a run of two or
 * more letters standing alone, so an identifier such as `get_weather` is none.
 */
export function pickWord(text: string): string {
  let last: string | undefined;
  let name: string | undefined;
  for (const match of text.matchAll(/[\p{L}\p{N}_]+/gu)) {
    const word = match[0];
    if (!/^\p{L}{2,}$/u.test(word)) continue;
    let before = match.index - 1;
    while (before >= 0 && /\s/.test(text[before] as string)) before--;
    const beginsSentence = before < 0 || '.!?'.includes(text[before] as string);
    last = word;
    if (!beginsSentence && /^\p{Lu}/u.test(word)) name = word;
  }
  return name ?? last ?? 'value';
}

/** 1, or the nearest value the schema's minimum and maximum allow. */
function smallNumber(schema: Record<string, unknown>): number {
  let value = 1;
  if (typeof schema.minimum === 'number' && value < schema.minimum) value = schema.minimum;
  if (typeof schema.maximum === 'number' && value > schema.maximum) value = schema.maximum;
  return value;
}

/** A plausible value for one property's schema. */
function valueFor(schema: unknown, word: string): unknown {
  if (!isObject(schema)) return word;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if (Object.hasOwn(schema, 'const')) return schema.const;
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(alternatives) && alternatives.length > 0) return valueFor(alternatives[0], word);
  const types: unknown[] = Array.isArray(schema.type) ? schema.type : [schema.type];
  const type = types.find((t) => t !== 'null') ?? types[0];
  if (type === 'integer') return Math.ceil(smallNumber(schema));
  if (type === 'number') return smallNumber(schema);
  if (type === 'boolean') return true;
  if (type === 'array') return [];
  if (type === 'object' || (type === undefined && isObject(schema.properties))) return {};
  if (type === 'null') return null;
  const max = schema.maxLength;
  return typeof max === 'number' ? Array.from(word).slice(0, Math.max(1, max)).join('') : word;
}

/**
 * The arguments for a function's `parameters`: each `required` property (every property when
 * none is required) gets a value by its schema — its enum's first value, else by type: a string
 * `word`, a number 1, true, [] or {}.
 */
export function argumentsFor(parameters: unknown, word: string): Record<string, unknown> {
  if (!isObject(parameters) || !isObject(parameters.properties)) return {};
  const properties = parameters.properties;
  const required = Array.isArray(parameters.required)
    ? parameters.required.filter((key): key is string => typeof key === 'string')
    : [];
  const keys = required.length > 0 ? required : Object.keys(properties);
  return Object.fromEntries(
    keys.map((key) => [key, valueFor(Object.hasOwn(properties, key) ? properties[key] : undefined, word)]),
  );
}

export interface CallPlan {
  tool: ToolSpec;
  mode: CallMode;
  arguments: Record<string, unknown>;
}

/**
 * Whether the model calls a tool, and which: a named tool_choice calls that tool; "required" the
 * tool named earliest in the last user message, else the first tool; "auto" calls only when the
 * last message is the user's and names a tool (as a whole word); "none" never calls.
 */
export function planToolCall(messages: readonly ChatMessage[], settings: ToolSettings): CallPlan | undefined {
  const { tools, choice } = settings;
  if (choice === 'none' || tools.length === 0) return undefined;
  const lastUser = messages.findLast((m) => m.role === 'user')?.content ?? '';
  let tool: ToolSpec | undefined;
  let mode: CallMode = 'auto';
  if (typeof choice === 'object') {
    mode = 'named';
    tool = tools.find((t) => t.name === choice.name);
  } else if (choice === 'required') {
    mode = 'required';
    tool = firstNamed(tools, lastUser) ?? tools[0];
  } else {
    const last = messages.at(-1);
    if (last?.role !== 'user') return undefined;
    tool = firstNamed(tools, last.content);
  }
  return tool && { tool, mode, arguments: argumentsFor(tool.parameters, pickWord(lastUser)) };
}

export interface DecodedCall {
  /** One per token generated. */
  steps: CallStep[];
  /** Undefined when max_tokens ended the call before its name was complete. */
  call: ToolCallOutcome | undefined;
  finishReason: FinishReason;
}

/**
 * The call as the model decodes it within `budget` tokens: the function's name (unless the engine
 * forces it), then the arguments text, token by token. A call the budget cuts short ends with
 * finish_reason "length", its arguments cut where the budget ended.
 */
export function decodeCall(plan: CallPlan, dialect: ToolDialect, budget: number): DecodedCall {
  const pieces = tokenize(dialect.formatArguments(plan.arguments));
  const nameTokens = dialect.writesName(plan.mode) ? countTokens(plan.tool.name) : 0;
  const total = nameTokens + pieces.length;
  const generated = Math.min(budget, total);
  const headerAt = Math.max(0, nameTokens - 1);
  const call =
    generated > headerAt
      ? {
          id: dialect.callId(),
          name: plan.tool.name,
          arguments: pieces.slice(0, generated - nameTokens).join(''),
          mode: plan.mode,
        }
      : undefined;
  const steps = Array.from({ length: generated }, (_, i) => ({
    header: i === headerAt ? call : undefined,
    piece: i < nameTokens ? '' : (pieces[i - nameTokens] as string),
  }));
  return { steps, call, finishReason: generated === total ? dialect.finishReason(plan.mode) : 'length' };
}

/**
 * Answering a tool's result, the model writes one sentence and stops (its end-of-turn token): the
 * tokens up to the first that ends a sentence, or undefined if none does within the budget.
 */
export function firstSentenceLength(tokens: readonly string[]): number | undefined {
  const end = tokens.findIndex((token) => token.endsWith('.'));
  return end < 0 ? undefined : end + 1;
}
