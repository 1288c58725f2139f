import { STATUS_CODES } from 'node:http';
import type { ChatMessage } from './text.js';

/**
 * The OpenAI chat-completions wire shapes as vLLM's OpenAI server speaks them: pure functions from
 * a request body to a parsed request or an error, and from results to response bodies.
 */

/** vLLM's error envelope (`ErrorResponse` wrapping `ErrorInfo`): `code` is the HTTP status. */
export interface VllmError {
  status: number;
  body: { error: { message: string; type: string; param: string | null; code: number } };
}

/** vLLM names the error type after the status: `BadRequestError`, `NotFoundError`, … */
export function errorType(status: number): string {
  const phrase = (STATUS_CODES[status] ?? 'Unknown').replace(/[^A-Za-z]/g, '');
  return phrase.endsWith('Error') ? phrase : `${phrase}Error`;
}

export function vllmError(status: number, message: string, param: string | null = null): VllmError {
  return { status, body: { error: { message, type: errorType(status), param, code: status } } };
}

export const modelNotFound = (model: string) => vllmError(404, `The model \`${model}\` does not exist.`);

export interface ChatRequest {
  /** Absent means the served model, as in vLLM. */
  model: string | undefined;
  messages: ChatMessage[];
  /** max_completion_tokens, else max_tokens; absent means the server's default. */
  maxTokens: number | undefined;
  stop: string[];
  seed: number | undefined;
  stream: boolean;
  includeUsage: boolean;
}

export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
export const absent = (value: unknown) => value === undefined || value === null;
const bad = (message: string, param: string) => vllmError(400, message, param);

function parseContent(content: unknown, at: string): string | VllmError {
  if (absent(content)) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return bad(`${at} must be a string or an array of content parts`, at);
  const texts: string[] = [];
  for (const [j, part] of content.entries()) {
    if (!isObject(part) || part.type !== 'text' || typeof part.text !== 'string') {
      const type = isObject(part) ? String(part.type) : typeof part;
      return bad(
        `${at}[${j}]: content parts of type "${type}" are not supported by this text-only model`,
        at,
      );
    }
    texts.push(part.text);
  }
  return texts.join('\n');
}

/** Chat messages as chat completions (and /tokenize) take them: string or text-part content. */
export function parseMessages(messages: unknown): ChatMessage[] | VllmError {
  if (!Array.isArray(messages) || messages.length === 0) {
    return bad('messages must be a non-empty array', 'messages');
  }
  const parsed: ChatMessage[] = [];
  for (const [i, message] of messages.entries()) {
    if (!isObject(message) || typeof message.role !== 'string') {
      return bad(`messages[${i}] must be an object with a string role`, 'messages');
    }
    const content = parseContent(message.content, `messages[${i}].content`);
    if (typeof content !== 'string') return content;
    parsed.push({ role: message.role, content });
  }
  return parsed;
}

function parseMaxTokens(body: Record<string, unknown>): number | undefined | VllmError {
  const name = absent(body.max_completion_tokens) ? 'max_tokens' : 'max_completion_tokens';
  const value = body[name];
  if (absent(value)) return undefined;
  if (!Number.isInteger(value)) return bad(`${name} must be an integer`, name);
  if ((value as number) < 1) return bad(`${name} must be at least 1, got ${value}.`, name);
  return value as number;
}

function parseStop(stop: unknown): string[] | VllmError {
  if (absent(stop)) return [];
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string')) {
    return bad('stop must be a string or an array of strings', 'stop');
  }
  return list.filter((s) => s !== '');
}

/** Validates an OpenAI chat-completions body; tools, tool_choice and response_format are accepted and ignored. */
export function parseChatRequest(body: unknown): ChatRequest | VllmError {
  if (!isObject(body)) return bad('the request body must be a JSON object', 'body');
  if (!absent(body.model) && typeof body.model !== 'string') return bad('model must be a string', 'model');
  const messages = parseMessages(body.messages);
  if (!Array.isArray(messages)) return messages;
  const maxTokens = parseMaxTokens(body);
  if (typeof maxTokens === 'object') return maxTokens;
  const stop = parseStop(body.stop);
  if (!Array.isArray(stop)) return stop;

  if (!absent(body.n) && body.n !== 1) {
    return bad(
      `n must be 1: the simulator generates one choice per request, got ${JSON.stringify(body.n)}.`,
      'n',
    );
  }
  if (!absent(body.seed) && !Number.isInteger(body.seed)) return bad('seed must be an integer', 'seed');
  if (!absent(body.temperature) && !(typeof body.temperature === 'number' && body.temperature >= 0)) {
    return bad('temperature must be a number of at least 0', 'temperature');
  }
  if (!absent(body.top_p) && !(typeof body.top_p === 'number' && body.top_p > 0 && body.top_p <= 1)) {
    return bad('top_p must be a number in (0, 1]', 'top_p');
  }
  if (!absent(body.stream) && typeof body.stream !== 'boolean')
    return bad('stream must be a boolean', 'stream');
  const stream = body.stream === true;
  let includeUsage = false;
  if (!absent(body.stream_options)) {
    if (!stream) return bad('Stream options can only be defined when `stream=True`.', 'stream_options');
    if (!isObject(body.stream_options)) return bad('stream_options must be an object', 'stream_options');
    includeUsage = body.stream_options.include_usage === true;
  }
  return {
    model: absent(body.model) ? undefined : (body.model as string),
    messages,
    maxTokens,
    stop,
    seed: absent(body.seed) ? undefined : (body.seed as number),
    stream,
    includeUsage,
  };
}

export const isVllmError = (value: unknown): value is VllmError => isObject(value) && 'status' in value;

/** vLLM's two context checks: the prompt alone, then the prompt plus the requested completion. */
export function checkContext(
  promptTokens: number,
  maxTokens: number | undefined,
  contextWindow: number,
): VllmError | undefined {
  if (promptTokens >= contextWindow) {
    return vllmError(
      400,
      `This model's maximum context length is ${contextWindow} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
    );
  }
  if (maxTokens !== undefined && promptTokens + maxTokens > contextWindow) {
    return vllmError(
      400,
      `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ${contextWindow} tokens and your request has ${promptTokens} input tokens (${maxTokens} > ${contextWindow} - ${promptTokens}).`,
    );
  }
  return undefined;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export const usage = (prompt: number, completion: number, cached: number): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
  prompt_tokens_details: { cached_tokens: cached },
});

export interface Completion {
  id: string;
  created: number;
  model: string;
}

export type FinishReason = 'length' | 'stop';

export const completionBody = (c: Completion, content: string, finish: FinishReason, u: Usage) => ({
  id: c.id,
  object: 'chat.completion',
  created: c.created,
  model: c.model,
  choices: [{ index: 0, message: { role: 'assistant', content }, logprobs: null, finish_reason: finish }],
  usage: u,
});

/** One `chat.completion.chunk` with a single choice. */
export const chunkBody = (c: Completion, delta: Record<string, string>, finish: FinishReason | null) => ({
  id: c.id,
  object: 'chat.completion.chunk',
  created: c.created,
  model: c.model,
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
});

/** The chunk stream_options.include_usage adds after the last choice chunk. */
export const usageChunkBody = (c: Completion, u: Usage) => ({
  id: c.id,
  object: 'chat.completion.chunk',
  created: c.created,
  model: c.model,
  choices: [],
  usage: u,
});

/** One server-sent event as OpenAI streams them. */
export const sse = (payload: unknown): string => `data: ${JSON.stringify(payload)}\n\n`;
export const SSE_DONE = 'data: [DONE]\n\n';
