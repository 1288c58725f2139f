import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Flavor } from './flavor.js';
import { renderMetrics } from './metrics.js';
import {
  type ChatRequest,
  type ChoiceOutcome,
  type Completion,
  parseChatRequest,
  type RunFigures,
  type SimError,
  type StepToken,
  type StreamWriter,
} from './protocol.js';
import { vllmTokenize } from './tokenize.js';
import type { CallStep, ToolCallOutcome } from './tools.js';
import { vllmToolDialect } from './vllm-tools.js';

/**
 * vLLM's OpenAI server (V1, as of 0.10) on the wire: its error envelope, the full
 * `ChatCompletionResponse` a non-streaming request gets (every field of the pydantic model,
 * nulls included), the chunks of a stream, and its routes.
 */

/** vLLM names the error type after the status: `BadRequestError`, `NotFoundError`, … */
export function errorType(status: number): string {
  const phrase = (STATUS_CODES[status] ?? 'Unknown').replace(/[^A-Za-z]/g, '');
  return phrase.endsWith('Error') ? phrase : `${phrase}Error`;
}

/** vLLM's error envelope (`ErrorResponse` wrapping `ErrorInfo`): `code` is the HTTP status. */
export function vllmError(status: number, message: string, param: string | null = null): SimError {
  return { status, body: { error: { message, type: errorType(status), param, code: status } } };
}

const bad = (message: string, param: string) => vllmError(400, message, param);
const tools = vllmToolDialect(vllmError);

/** vLLM's two context checks: the prompt alone, then the prompt plus the requested completion. */
export function checkContext(
  promptTokens: number,
  maxTokens: number | undefined,
  contextWindow: number,
): SimError | undefined {
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

/** vLLM counts every choice's tokens in `completion_tokens`. */
const usage = (outcomes: readonly ChoiceOutcome[], figures: RunFigures) => {
  const completion = outcomes.reduce((sum, o) => sum + o.completionTokens, 0);
  return {
    prompt_tokens: figures.promptTokens,
    completion_tokens: completion,
    total_tokens: figures.promptTokens + completion,
    prompt_tokens_details: { cached_tokens: figures.cachedTokens },
  };
};

const chunk = (c: Completion, choices: unknown[], extra: Record<string, unknown> = {}) => ({
  id: c.id,
  object: 'chat.completion.chunk',
  created: c.created,
  model: c.model,
  choices,
  ...extra,
});

/**
 * A tool call's delta, as vLLM's serving streams it (DeltaToolCall: id, type, index, function,
 * unset fields left out). The call is announced with its name — by the tool parser for "auto"
 * (`function: {name}`), with `arguments` too for "required" and for a named tool_choice (whose
 * first arguments piece rides along) — then each token adds its piece of the arguments.
 */
function callDelta(step: CallStep): Record<string, unknown> | undefined {
  if (step.header) {
    const { id, name, mode } = step.header;
    const fn = mode === 'auto' ? { name } : { name, arguments: step.piece };
    return { tool_calls: [{ id, type: 'function', index: 0, function: fn }] };
  }
  return step.piece === '' ? undefined : { tool_calls: [{ index: 0, function: { arguments: step.piece } }] };
}

/** What a token adds to its choice's message, if anything. */
function tokenDelta(token: StepToken): Record<string, unknown> | undefined {
  if (token.call) return callDelta(token.call);
  return token.text === '' ? undefined : { content: token.text };
}

/** A call as vLLM's ToolCall model dumps it. */
const toolCall = ({ id, name, arguments: args }: ToolCallOutcome) => ({
  id,
  type: 'function',
  function: { name, arguments: args },
});

/**
 * A stream as vLLM sends it: in the first step the role of every choice, then one chunk per token
 * and choice (a tool call's pieces as `tool_calls` deltas), a chunk with each choice's finish
 * reason, and — with include_usage — one usage chunk for all choices.
 */
function streamWriter(c: Completion, request: ChatRequest): StreamWriter {
  return {
    step(tokens) {
      const events: unknown[] = [];
      for (const token of tokens) {
        if (!token.first) continue;
        const delta = { role: 'assistant', content: '' };
        events.push(chunk(c, [{ index: token.index, delta, logprobs: null, finish_reason: null }]));
      }
      for (const token of tokens) {
        const delta = tokenDelta(token);
        if (delta)
          events.push(chunk(c, [{ index: token.index, delta, logprobs: null, finish_reason: null }]));
        if (token.last) {
          const finish = token.last.finishReason;
          events.push(chunk(c, [{ index: token.index, delta: {}, logprobs: null, finish_reason: finish }]));
        }
      }
      return events;
    },
    close(outcomes, figures) {
      return request.includeUsage ? [chunk(c, [], { usage: usage(outcomes, figures) })] : [];
    },
  };
}

export const vllm: Flavor = {
  name: 'vllm',
  headers: {},
  jsonContentType: 'application/json',
  sseHeaders: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' },
  chatPaths: ['/v1/chat/completions'],

  error: vllmError,
  unknownRoute: () => ({ status: 404, body: { detail: 'Not Found' } }),
  wrongMethod: () => ({ status: 405, body: { detail: 'Method Not Allowed' } }),
  invalidJson: (_text, cause) => vllmError(400, `the request body is not valid JSON: ${cause.message}`),
  // Not answered: vLLM opens its port only once the model is loaded (the server refuses meanwhile).
  loading: () => vllmError(503, 'Loading model'),

  parseChat: (body, model) =>
    parseChatRequest(body, {
      bad,
      streamOptionsNeedStream: true,
      tools,
      vision: model.vision,
      cacheSalt: true,
    }),
  tools,
  checkModel: (requested, served) =>
    requested === undefined || requested === served
      ? undefined
      : vllmError(404, `The model \`${requested}\` does not exist.`),
  budget(promptTokens, request, settings) {
    const tooLong = checkContext(promptTokens, request.maxTokens, settings.contextWindow);
    if (tooLong) return tooLong;
    return request.maxTokens ?? Math.min(settings.maxTokensDefault, settings.contextWindow - promptTokens);
  },

  completionId: () => `chatcmpl-${randomUUID().replaceAll('-', '')}`,
  completionBody: (c, outcomes, figures) => ({
    id: c.id,
    object: 'chat.completion',
    created: c.created,
    model: c.model,
    choices: outcomes.map((o) => ({
      index: o.index,
      message: {
        role: 'assistant',
        // A tool parser's call ("auto") leaves no content; vLLM's own "required" and named paths ''.
        content: o.toolCall ? (o.toolCall.mode === 'auto' ? null : '') : o.text,
        refusal: null,
        annotations: null,
        audio: null,
        function_call: null,
        tool_calls: o.toolCall ? [toolCall(o.toolCall)] : [],
        reasoning_content: null,
      },
      logprobs: null,
      finish_reason: o.finishReason,
      stop_reason: o.stopString ?? null,
    })),
    service_tier: null,
    system_fingerprint: null,
    usage: usage(outcomes, figures),
    prompt_logprobs: null,
    kv_transfer_params: null,
  }),
  streamWriter,

  routes: {
    '/v1/models': {
      method: 'GET',
      answer: (_body, replica) => ({
        status: 200,
        json: {
          object: 'list',
          data: [
            {
              id: replica.model,
              object: 'model',
              created: Math.floor(Date.now() / 1000),
              owned_by: 'simulator',
              root: replica.model,
              parent: null,
              max_model_len: replica.contextWindow,
            },
          ],
        },
      }),
    },
    '/health': { method: 'GET', answer: () => ({ status: 200, json: null }) },
    '/metrics': {
      method: 'GET',
      answer: (_body, replica) => ({
        status: 200,
        contentType: 'text/plain; version=0.0.4; charset=utf-8',
        text: renderMetrics(replica.stats(), replica, 'vllm'),
      }),
    },
    '/tokenize': {
      method: 'POST',
      readsBody: true,
      answer: (body, replica) => vllmTokenize(body, replica, vllm),
    },
    '/reset_prefix_cache': {
      method: 'POST',
      answer: (_body, replica) => {
        replica.resetPrefixCache();
        return { status: 200, json: null };
      },
    },
  },
};
