import type { JsonFormat } from './json-output.js';
import type { ChatMessage } from './text.js';
import type { CallStep, ToolCallOutcome, ToolChoice, ToolDialect, ToolSpec } from './tools.js';

/**
 * What every flavor of the OpenAI chat-completions protocol shares: the parsed request, the
 * outcome of each generated choice, and server-sent events. Pure functions from a request body
 * to a parsed request or an error; the wire shapes of answers are the flavors' (vllm.ts,
 * llamacpp.ts).
 */

/** An error answer: its HTTP status and its JSON body, in the engine's own shape. */
export interface SimError {
  status: number;
  body: Record<string, unknown>;
}

export const isSimError = (value: unknown): value is SimError =>
  isObject(value) && typeof value.status === 'number' && isObject(value.body);

export interface ChatRequest {
  /** Absent means the served model. */
  model: string | undefined;
  messages: ChatMessage[];
  /** max_completion_tokens, else max_tokens; absent means the server's default. */
  maxTokens: number | undefined;
  stop: string[];
  seed: number | undefined;
  /** Choices to generate (OpenAI's `n`). */
  n: number;
  stream: boolean;
  includeUsage: boolean;
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  /** `response_format` asking for JSON (json-output.ts); undefined for text. */
  format: JsonFormat | undefined;
  /** vLLM's `cache_salt`: prompts of different salts share no cached block. */
  cacheSalt: string | undefined;
}

/** The JSON a `response_format` asks for: `json_object` (llama.cpp's may carry a `schema`) or `json_schema`. */
function jsonFormatOf(format: unknown): JsonFormat | undefined {
  if (!isObject(format)) return undefined;
  if (format.type === 'json_object') return { schema: isObject(format.schema) ? format.schema : undefined };
  if (format.type !== 'json_schema') return undefined;
  const spec = format.json_schema;
  return { schema: isObject(spec) && isObject(spec.schema) ? spec.schema : undefined };
}

/** The most choices one request may ask for: enough for any client, few enough to stay cheap. */
export const MAX_CHOICES = 128;

export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
export const absent = (value: unknown) => value === undefined || value === null;

/** How a flavor words a refusal of one field. */
export type BadField = (message: string, param: string) => SimError;

/** Where an image stands in the prompt of a model that reads images (llama.cpp's media marker). */
const MEDIA_MARKER = '<__media__>';

function parseContent(content: unknown, at: string, bad: BadField, vision: boolean): string | SimError {
  if (absent(content)) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return bad(`${at} must be a string or an array of content parts`, at);
  const texts: string[] = [];
  for (const [j, part] of content.entries()) {
    if (vision && isObject(part) && part.type === 'image_url') {
      texts.push(MEDIA_MARKER);
      continue;
    }
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

/**
 * Chat messages as chat completions (and /tokenize) take them: string or text-part content; an
 * assistant message's `tool_calls` and a `tool` message checked by the flavor's dialect, the
 * calls written into the message's text as the chat template renders them.
 */
export function parseMessages(
  messages: unknown,
  bad: BadField,
  dialect: ToolDialect,
  vision = false,
): ChatMessage[] | SimError {
  if (!Array.isArray(messages) || messages.length === 0) {
    return bad('messages must be a non-empty array', 'messages');
  }
  const parsed: ChatMessage[] = [];
  for (const [i, message] of messages.entries()) {
    if (!isObject(message) || typeof message.role !== 'string') {
      return bad(`messages[${i}] must be an object with a string role`, 'messages');
    }
    const content = parseContent(message.content, `messages[${i}].content`, bad, vision);
    if (typeof content !== 'string') return content;
    let calls = '';
    if (message.role === 'assistant' && !absent(message.tool_calls)) {
      const rendered = dialect.renderCalls(message.tool_calls, `messages[${i}]`);
      if (typeof rendered !== 'string') return rendered;
      calls = rendered;
    }
    const refused = message.role === 'tool' ? dialect.checkToolMessage(message, `messages[${i}]`) : undefined;
    if (refused) return refused;
    parsed.push({ role: message.role, content: content + calls });
  }
  return parsed;
}

function parseMaxTokens(body: Record<string, unknown>, bad: BadField): number | undefined | SimError {
  const name = absent(body.max_completion_tokens) ? 'max_tokens' : 'max_completion_tokens';
  const value = body[name];
  if (absent(value)) return undefined;
  if (!Number.isInteger(value)) return bad(`${name} must be an integer`, name);
  if ((value as number) < 1) return bad(`${name} must be at least 1, got ${value}.`, name);
  return value as number;
}

function parseStop(stop: unknown, bad: BadField): string[] | SimError {
  if (absent(stop)) return [];
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string')) {
    return bad('stop must be a string or an array of strings', 'stop');
  }
  return list.filter((s) => s !== '');
}

export interface ParseRules {
  bad: BadField;
  /** vLLM refuses stream_options on a request that does not stream; llama.cpp ignores them. */
  streamOptionsNeedStream: boolean;
  /** The engine's reading of tools, tool_choice and tool messages. */
  tools: ToolDialect;
  /** The model reads `image_url` parts (each stands in the prompt as a media marker). */
  vision: boolean;
  /** The engine takes `cache_salt` (vLLM); others ignore the field, as llama.cpp does. */
  cacheSalt: boolean;
}

/**
 * Validates an OpenAI chat-completions body; tools and tool_choice as the flavor's dialect reads
 * them, response_format's JSON kept for the output (a flavor checks what its engine checks before this).
 */
export function parseChatRequest(body: unknown, rules: ParseRules): ChatRequest | SimError {
  const { bad } = rules;
  if (!isObject(body)) return bad('the request body must be a JSON object', 'body');
  if (!absent(body.model) && typeof body.model !== 'string') return bad('model must be a string', 'model');
  const messages = parseMessages(body.messages, bad, rules.tools, rules.vision);
  if (!Array.isArray(messages)) return messages;
  const tools = rules.tools.parseTools(body);
  if (isSimError(tools)) return tools;
  const maxTokens = parseMaxTokens(body, bad);
  if (typeof maxTokens === 'object') return maxTokens;
  const stop = parseStop(body.stop, bad);
  if (!Array.isArray(stop)) return stop;

  if (!absent(body.n) && !Number.isInteger(body.n)) return bad('n must be an integer', 'n');
  const n = absent(body.n) ? 1 : (body.n as number);
  if (n < 1) return bad(`n must be at least 1, got ${n}.`, 'n');
  if (n > MAX_CHOICES) return bad(`n must be at most ${MAX_CHOICES}, got ${n}.`, 'n');
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
    if (!stream && rules.streamOptionsNeedStream) {
      return bad('Stream options can only be defined when `stream=True`.', 'stream_options');
    }
    if (!isObject(body.stream_options)) return bad('stream_options must be an object', 'stream_options');
    includeUsage = stream && body.stream_options.include_usage === true;
  }
  const salt = rules.cacheSalt ? body.cache_salt : undefined;
  if (!absent(salt) && (typeof salt !== 'string' || salt === '')) {
    return bad("Parameter 'cache_salt' must be a non-empty string if provided.", 'cache_salt');
  }
  return {
    model: absent(body.model) ? undefined : (body.model as string),
    messages,
    maxTokens,
    stop,
    seed: absent(body.seed) ? undefined : (body.seed as number),
    n,
    stream,
    includeUsage,
    tools: tools.tools,
    toolChoice: tools.choice,
    format: jsonFormatOf(body.response_format),
    cacheSalt: absent(salt) ? undefined : (salt as string),
  };
}

export type FinishReason = 'length' | 'stop' | 'tool_calls';

/** One generated choice, as it ends. */
export interface ChoiceOutcome {
  index: number;
  /** The whole text (a stream sends it token by token). */
  text: string;
  finishReason: FinishReason;
  /** The stop string that ended it, if one did. */
  stopString: string | undefined;
  /** Tokens generated for it, the one that completed a stop string included. */
  completionTokens: number;
  /** The tool call it makes instead of text, if it makes one. */
  toolCall?: ToolCallOutcome;
}

/** What the engine did for a request, shared by its choices: one prompt, prefilled once. */
export interface RunFigures {
  promptTokens: number;
  cachedTokens: number;
  /** Modelled prefill time of the uncached prompt tokens. */
  prefillMs: number;
  decodeMsPerToken: number;
}

/** The identity every body and chunk of one answer carries. */
export interface Completion {
  id: string;
  created: number;
  model: string;
}

/** One choice's token in a decode step of a stream. */
export interface StepToken {
  index: number;
  text: string;
  /** The choice's first token: the stream announces the assistant's role before it. */
  first: boolean;
  /** Set on the choice's last token: how it ended. */
  last: ChoiceOutcome | undefined;
  /** Set on every token of a tool call. */
  call?: CallStep;
}

/** How a flavor lays out a stream: events per decode step, then the closing ones before [DONE]. */
export interface StreamWriter {
  step(tokens: readonly StepToken[], figures: RunFigures): unknown[];
  close(outcomes: readonly ChoiceOutcome[], figures: RunFigures): unknown[];
}

/** One server-sent event as OpenAI streams them. */
export const sse = (payload: unknown): string => `data: ${JSON.stringify(payload)}\n\n`;
export const SSE_DONE = 'data: [DONE]\n\n';
