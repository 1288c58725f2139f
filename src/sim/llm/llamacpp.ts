import { randomBytes } from 'node:crypto';
import type { Flavor } from './flavor.js';
import { LLAMA_BUILD, llamaRoutes } from './llamacpp-routes.js';
import { jsonType, llamaToolDialect } from './llamacpp-tools.js';
import {
  absent,
  type ChatRequest,
  type ChoiceOutcome,
  type Completion,
  isObject,
  parseChatRequest,
  type RunFigures,
  type SimError,
  type StreamWriter,
} from './protocol.js';
import type { CallStep, ToolCallOutcome } from './tools.js';

/**
 * llama.cpp's llama-server on the wire, as captured from build b11669
 * (../shared/reference/recordings/llamacpp): its error envelope and types, `system_fingerprint`
 * and `timings` on answers, the role chunk only before a choice's first token, `timings` on the
 * usage chunk (or on the finish chunk when the client asked for no usage), usage that counts one
 * choice, and its routes (llamacpp-routes.ts).
 */

/** llama-server's error types by status (format_error_response). */
const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  500: 'server_error',
  501: 'not_supported_error',
  503: 'unavailable_error',
};

export function llamaError(status: number, message: string, type?: string): SimError {
  const named = type ?? ERROR_TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'server_error');
  return { status, body: { error: { code: status, message, type: named } } };
}

const bad = (message: string) => llamaError(400, message);
const tools = llamaToolDialect((status, message) => llamaError(status, message));

/** Fields llama-server reads as numbers or booleans; a value of another type is a 400 naming it. */
const TYPED_FIELDS: Record<string, 'number' | 'boolean' | 'object'> = {
  logprobs: 'number',
  top_logprobs: 'number',
  max_tokens: 'number',
  max_completion_tokens: 'number',
  n: 'number',
  seed: 'number',
  temperature: 'number',
  top_p: 'number',
  top_k: 'number',
  min_p: 'number',
  presence_penalty: 'number',
  frequency_penalty: 'number',
  stream: 'boolean',
  response_format: 'object',
};

/** The checks llama-server makes before it reads the messages, with its exact words. */
function llamaChecks(body: unknown, vision: boolean): SimError | undefined {
  if (!isObject(body) || absent(body.messages)) return bad("'messages' is required");
  for (const [name, expected] of Object.entries(TYPED_FIELDS)) {
    const value = body[name];
    if (absent(value)) continue;
    // nlohmann converts a boolean to a number, nothing else.
    const actual = jsonType(value);
    if (actual === expected || (expected === 'number' && actual === 'boolean')) continue;
    return bad(`Field '${name}': [json.exception.type_error.302] type must be ${expected}, but is ${actual}`);
  }
  const media = mediaRefusal(body.messages, vision);
  if (media) return media;
  if (isObject(body.response_format)) {
    const type = body.response_format.type;
    if (!['text', 'json_object', 'json_schema'].includes(type as string)) {
      return bad(
        `response_format type must be one of "text" or "json_object", but got: ${String(type ?? '')}`,
      );
    }
  }
  return undefined;
}

/**
 * An image or audio part sent to a model served without its projector (unless the simulator has
 * `vision`, its model has none: /props says `modalities.vision` false): llama-server throws while
 * it reads the messages (oaicompat_chat_params_parse), which answers 500 `server_error` in these
 * words. The simulator's projector reads images only, as most do.
 */
function mediaRefusal(messages: unknown, vision: boolean): SimError | undefined {
  for (const message of Array.isArray(messages) ? messages : []) {
    const content = isObject(message) ? message.content : undefined;
    for (const part of Array.isArray(content) ? content : []) {
      const media = !isObject(part)
        ? undefined
        : part.type === 'image_url'
          ? vision
            ? undefined
            : 'image'
          : part.type === 'input_audio'
            ? 'audio'
            : undefined;
      if (media)
        return llamaError(
          500,
          `${media} input is not supported - hint: if this is unexpected, you may need to provide the mmproj`,
        );
    }
  }
  return undefined;
}

/** nlohmann::json's parse error for a body that is not JSON, located as it locates it. */
export function parseErrorMessage(text: string, cause: Error): string {
  const prefix = '[json.exception.parse_error.101] parse error at';
  if (text.trim() === '') {
    return `${prefix} line 1, column 1: attempting to parse an empty input; check that your input string or stream contains the expected JSON`;
  }
  const at = /position (\d+)/.exec(cause.message);
  const position = at ? Number(at[1]) : text.length;
  const before = text.slice(0, position);
  const line = before.split('\n').length;
  const column = position - (before.lastIndexOf('\n') + 1) + 1;
  if (position >= text.length) {
    return `${prefix} line ${line}, column ${column}: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal`;
  }
  return `${prefix} line ${line}, column ${column}: syntax error while parsing value - invalid literal; last read: '${before.slice(-10)}${text[position]}'`;
}

/** llama-server's `timings` for one choice: the shared prompt, that choice's generation. */
function timings(figures: RunFigures, predicted: number) {
  // Times as llama.cpp reports them, in ms to the microsecond; never zero, as no real step is.
  const ms = (value: number) => Math.max(0.001, Math.round(value * 1000) / 1000);
  const promptN = figures.promptTokens - figures.cachedTokens;
  const promptMs = ms(figures.prefillMs);
  const predictedMs = ms(predicted * figures.decodeMsPerToken);
  return {
    cache_n: figures.cachedTokens,
    prompt_n: promptN,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptMs / promptN,
    prompt_per_second: (1000 * promptN) / promptMs,
    predicted_n: predicted,
    predicted_ms: predictedMs,
    predicted_per_token_ms: predictedMs / predicted,
    predicted_per_second: (1000 * predicted) / predictedMs,
  };
}

/** Usage as llama-server reports it for one choice (with n > 1, each choice's own). */
const usage = (outcome: ChoiceOutcome, figures: RunFigures) => ({
  completion_tokens: outcome.completionTokens,
  prompt_tokens: figures.promptTokens,
  total_tokens: figures.promptTokens + outcome.completionTokens,
  prompt_tokens_details: { cached_tokens: figures.cachedTokens },
});

const chunk = (c: Completion, choices: unknown[], extra: Record<string, unknown> = {}) => ({
  choices,
  created: c.created,
  id: c.id,
  model: c.model,
  system_fingerprint: LLAMA_BUILD,
  object: 'chat.completion.chunk',
  ...extra,
});

const delta = (index: number, value: Record<string, unknown>, finish: string | null = null) => ({
  finish_reason: finish,
  index,
  delta: value,
});

/**
 * A tool call's deltas as llama-server streams them (common_chat_msg_diff_to_json_oaicompat):
 * once the name is parsed, `{index, id, type, function: {name}}` on its own, then each piece of
 * the arguments as `{index, function: {arguments}}`.
 */
function callDeltas(step: CallStep): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  if (step.header) {
    const { id, name } = step.header;
    deltas.push({ tool_calls: [{ index: 0, id, type: 'function', function: { name } }] });
  }
  if (step.piece !== '') deltas.push({ tool_calls: [{ index: 0, function: { arguments: step.piece } }] });
  return deltas;
}

/**
 * A stream as llama-server sends it: each choice's first token preceded by
 * `{role: "assistant", content: null}` (llama.cpp sends that chunk with the first token it can
 * send, and none when the first token was an incomplete UTF-8 character — the simulator's text is
 * always whole, so it always sends one), then each choice ends on its own: its finish chunk, then
 * with include_usage its usage chunk carrying `timings`, or else `timings` on the finish chunk.
 * (Several choices in one stream were not captured; this follows llama-server's code, where each
 * choice is a task that ends with its own final result.)
 */
function streamWriter(c: Completion, request: ChatRequest): StreamWriter {
  return {
    step(tokens, figures) {
      const events: unknown[] = [];
      for (const token of tokens) {
        if (token.first) events.push(chunk(c, [delta(token.index, { role: 'assistant', content: null })]));
        if (token.text !== '') events.push(chunk(c, [delta(token.index, { content: token.text })]));
        for (const value of token.call ? callDeltas(token.call) : [])
          events.push(chunk(c, [delta(token.index, value)]));
        const last = token.last;
        if (!last) continue;
        const times = { timings: timings(figures, last.completionTokens) };
        const finish = [delta(token.index, {}, last.finishReason)];
        if (request.includeUsage) {
          events.push(chunk(c, finish), chunk(c, [], { usage: usage(last, figures), ...times }));
        } else {
          events.push(chunk(c, finish, times));
        }
      }
      return events;
    },
    close: () => [],
  };
}

/** An answer's message with its tool call, as common_chat_msg::to_json_oaicompat writes it. */
const callMessage = ({ id, name, arguments: args }: ToolCallOutcome) => ({
  role: 'assistant',
  content: null,
  tool_calls: [{ type: 'function', function: { name, arguments: args }, id }],
});

export const llamacpp: Flavor = {
  name: 'llama.cpp',
  headers: { server: 'llama.cpp', 'access-control-allow-origin': '' },
  jsonContentType: 'application/json; charset=utf-8',
  sseHeaders: { 'content-type': 'text/event-stream', 'x-accel-buffering': 'no' },
  chatPaths: ['/v1/chat/completions', '/chat/completions'],

  error: (status, message) => llamaError(status, message),
  unknownRoute: () => ({
    status: 404,
    body: { error: { message: 'File Not Found', type: 'not_found_error', code: 404 } },
  }),
  // cpp-httplib answers a path served for another method as one not served at all.
  wrongMethod: () => llamacpp.unknownRoute(),
  invalidJson: (text, cause) => bad(parseErrorMessage(text, cause)),
  loading: () => ({
    status: 503,
    body: { error: { message: 'Loading model', type: 'unavailable_error', code: 503 } },
  }),

  parseChat: (body, model) =>
    llamaChecks(body, model.vision) ??
    parseChatRequest(body, {
      bad,
      streamOptionsNeedStream: false,
      tools,
      vision: model.vision,
      cacheSalt: false,
    }),
  tools,
  // One model per server: llama-server answers whatever model the request names.
  checkModel: () => undefined,
  budget(promptTokens, request, settings) {
    const nCtx = settings.contextWindow;
    if (promptTokens >= nCtx) {
      return {
        status: 400,
        body: {
          error: {
            code: 400,
            message: `request (${promptTokens} tokens) exceeds the available context size (${nCtx} tokens), try increasing it`,
            type: 'exceed_context_size_error',
            n_prompt_tokens: promptTokens,
            n_ctx: nCtx,
          },
        },
      };
    }
    // Generation stops when the slot's context is full: a longer max_tokens is no error.
    return Math.min(request.maxTokens ?? settings.maxTokensDefault, nCtx - promptTokens);
  },

  completionId: () => `chatcmpl-${randomBytes(24).toString('base64url').replace(/[-_]/g, 'x').slice(0, 32)}`,
  /** With n > 1, llama-server keeps the first choice's usage and timings (the recording: 8, not 16). */
  completionBody(c, outcomes, figures) {
    const first = outcomes[0] as ChoiceOutcome;
    return {
      choices: outcomes.map((o) => ({
        finish_reason: o.finishReason,
        index: o.index,
        message: o.toolCall ? callMessage(o.toolCall) : { role: 'assistant', content: o.text },
      })),
      created: c.created,
      model: c.model,
      system_fingerprint: LLAMA_BUILD,
      object: 'chat.completion',
      usage: usage(first, figures),
      id: c.id,
      timings: timings(figures, first.completionTokens),
    };
  },
  streamWriter,

  routes: llamaRoutes(() => llamacpp),
};
