import type { ChatCompletion, ChatMessage } from '../engines/types.js';
import type { Item, ResponseEcho } from './schema.js';

export type ResponseStatus = 'queued' | 'in_progress' | 'completed' | 'failed' | 'cancelled' | 'incomplete';

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** What a Response object says beyond the request's echo. */
export interface ResponseState {
  id: string;
  model: string;
  createdAt: number;
  status: ResponseStatus;
  output?: Item[];
  usage?: ResponseUsage | null;
  error?: { code: string; message: string } | null;
  incomplete?: { reason: string } | null;
  completedAt?: number | null;
}

/** The concatenated text of the output messages, their refusals aside: the SDKs' `output_text`. */
export function outputText(output: readonly Item[]): string {
  let text = '';
  for (const item of output) {
    if (item.type !== 'message') continue;
    for (const part of item.content as Array<{ type: string; text?: string }>) {
      if (part.type === 'output_text') text += part.text ?? '';
    }
  }
  return text;
}

/** The Response object in OpenAI's shape. */
export function responseObject(state: ResponseState, echo: ResponseEcho): Record<string, unknown> {
  const output = state.output ?? [];
  return {
    id: state.id,
    object: 'response',
    created_at: state.createdAt,
    status: state.status,
    background: echo.background,
    completed_at: state.completedAt ?? null,
    error: state.error ?? null,
    incomplete_details: state.incomplete ?? null,
    instructions: echo.instructions,
    max_output_tokens: echo.max_output_tokens,
    max_tool_calls: null,
    model: state.model,
    output,
    output_text: outputText(output),
    parallel_tool_calls: echo.parallel_tool_calls,
    previous_response_id: echo.previous_response_id,
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    store: echo.store,
    temperature: echo.temperature,
    text: echo.text,
    tool_choice: echo.tool_choice,
    tools: echo.tools,
    top_p: echo.top_p,
    truncation: echo.truncation ?? 'disabled',
    // Neither is nullable in OpenAI's schema: absent until known, or when not given.
    ...(state.usage ? { usage: state.usage } : {}),
    ...(echo.user === null ? {} : { user: echo.user }),
    metadata: echo.metadata,
  };
}

/** Chat usage as Responses usage; cached tokens from the engine's report, else the router's. */
export function responseUsage(usage: ChatCompletion['usage'], cachedFallback = 0): ResponseUsage | null {
  if (!usage) return null;
  const details = usage.prompt_tokens_details as { cached_tokens?: number } | undefined;
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: details?.cached_tokens ?? cachedFallback, cache_write_tokens: 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
  };
}

/** A message's content part: its text, or a refusal (OpenAI's `OutputMessageContent`). */
export type MessagePart =
  | { type: 'output_text'; text: string; annotations: unknown[]; logprobs: unknown[] }
  | { type: 'refusal'; refusal: string };

export const textPart = (text: string): MessagePart => ({
  type: 'output_text',
  text,
  annotations: [],
  logprobs: [],
});

export const refusalPart = (refusal: string): MessagePart => ({ type: 'refusal', refusal });

export const messageItem = (id: string, content: MessagePart[], status: string): Item => ({
  type: 'message',
  id,
  status,
  role: 'assistant',
  content,
});

export const functionCallItem = (
  id: string,
  call: { id?: unknown; function?: { name?: unknown; arguments?: unknown } },
  status: string,
): Item => ({
  type: 'function_call',
  id,
  call_id: typeof call.id === 'string' && call.id !== '' ? call.id : `call_${id.slice(3, 27)}`,
  name: String(call.function?.name ?? ''),
  arguments: String(call.function?.arguments ?? ''),
  status,
});

/**
 * The assistant's message as output items: its text and its refusal as one message, then each tool
 * call. An answer with neither text, refusal nor calls is one message with empty text, as a stream
 * of it is (events.ts): every answer that makes no call has its message.
 */
export function outputItems(
  message: ChatMessage | undefined,
  status: string,
  ids: (type: string, index: number) => string,
): Item[] {
  if (!message) return [];
  const items: Item[] = [];
  const content: MessagePart[] = [];
  if (typeof message.content === 'string' && message.content !== '') content.push(textPart(message.content));
  if (typeof message.refusal === 'string' && message.refusal !== '')
    content.push(refusalPart(message.refusal));
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
  if (content.length === 0 && calls.length === 0) content.push(textPart(''));
  if (content.length > 0) items.push(messageItem(ids('message', 0), content, status));
  for (const call of calls) items.push(functionCallItem(ids('function_call', items.length), call, status));
  return items;
}

/** How a chat finish reason ends a response: `length` and `content_filter` leave it incomplete. */
export function endOf(finishReason: string | null | undefined): {
  status: 'completed' | 'incomplete';
  incomplete: { reason: string } | null;
} {
  if (finishReason === 'length') return { status: 'incomplete', incomplete: { reason: 'max_output_tokens' } };
  if (finishReason === 'content_filter')
    return { status: 'incomplete', incomplete: { reason: 'content_filter' } };
  return { status: 'completed', incomplete: null };
}

/**
 * A Kiln job failure as the Response object's `error`: OpenAI's codes are few (`server_error`,
 * `invalid_prompt`, …), so the code is the nearest of them and the message starts with Kiln's own.
 */
export function responseError(code: string, message: string): { code: string; message: string } {
  const openai =
    code === 'engine-rejected'
      ? 'invalid_prompt'
      : code === 'invalid-image-url'
        ? 'invalid_image_url'
        : 'server_error';
  return { code: openai, message: `${code}: ${message}` };
}
