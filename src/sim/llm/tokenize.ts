import type { IncomingMessage, ServerResponse } from 'node:http';
import { readJson, sendError, sendJson } from './http.js';
import {
  absent,
  isObject,
  isVllmError,
  modelNotFound,
  parseMessages,
  type VllmError,
  vllmError,
} from './protocol.js';
import { renderChatPrompt, tokenId, tokenize } from './text.js';

/**
 * `POST /tokenize` in vLLM's two shapes — `{prompt}` for raw text, `{messages}` rendered with the
 * chat template, so the count is what a chat completion would report as prompt_tokens — and
 * llama.cpp's `{content}`.
 */
export interface TokenizeRequest {
  model: string | undefined;
  /** The text to tokenize: the prompt, the rendered messages or the content. */
  text: string;
  /** vLLM answers `{count, max_model_len, tokens}`; llama.cpp just `{tokens}`. */
  shape: 'vllm' | 'llama.cpp';
  /** vLLM's return_token_strs, llama.cpp's with_pieces: the token texts as well. */
  withPieces: boolean;
}

const bad = (message: string, param: string) => vllmError(400, message, param);

function optionalBoolean(body: Record<string, unknown>, name: string): boolean | undefined | VllmError {
  const value = body[name];
  if (absent(value)) return undefined;
  return typeof value === 'boolean' ? value : bad(`${name} must be a boolean`, name);
}

export function parseTokenizeRequest(body: unknown): TokenizeRequest | VllmError {
  if (!isObject(body)) return bad('the request body must be a JSON object', 'body');
  if (!absent(body.model) && typeof body.model !== 'string') return bad('model must be a string', 'model');
  const model = absent(body.model) ? undefined : (body.model as string);
  const given = ['prompt', 'messages', 'content'].filter((name) => !absent(body[name]));
  if (given.length !== 1) {
    return bad(
      'give exactly one of prompt (a string), messages (chat messages) or content (a string)',
      'prompt',
    );
  }
  const pieces = optionalBoolean(body, given[0] === 'content' ? 'with_pieces' : 'return_token_strs');
  if (isVllmError(pieces)) return pieces;
  const withPieces = pieces === true;

  if (given[0] === 'messages') {
    const messages = parseMessages(body.messages);
    if (!Array.isArray(messages)) return messages;
    const generation = optionalBoolean(body, 'add_generation_prompt');
    if (isVllmError(generation)) return generation;
    const text = renderChatPrompt(messages, generation ?? true);
    return { model, text, shape: 'vllm', withPieces };
  }
  const name = given[0] as 'prompt' | 'content';
  if (typeof body[name] !== 'string') return bad(`${name} must be a string`, name);
  return { model, text: body[name] as string, shape: name === 'content' ? 'llama.cpp' : 'vllm', withPieces };
}

/** The answer's body: token ids are a hash of each token's text, the same on every replica. */
export function tokenizeBody(request: TokenizeRequest, maxModelLen: number): Record<string, unknown> {
  const pieces = tokenize(request.text);
  const tokens = pieces.map(tokenId);
  if (request.shape === 'llama.cpp') {
    return {
      tokens: request.withPieces ? pieces.map((piece, i) => ({ id: tokens[i], piece })) : tokens,
    };
  }
  return {
    count: tokens.length,
    max_model_len: maxModelLen,
    tokens,
    ...(request.withPieces ? { token_strs: pieces } : {}),
  };
}

export async function handleTokenize(
  req: IncomingMessage,
  res: ServerResponse,
  settings: { model: string; contextWindow: number },
): Promise<void> {
  const read = await readJson(req);
  if ('error' in read) return sendError(res, read.error);
  const request = parseTokenizeRequest(read.body);
  if (isVllmError(request)) return sendError(res, request);
  if (request.model !== undefined && request.model !== settings.model) {
    return sendError(res, modelNotFound(request.model));
  }
  return sendJson(res, 200, tokenizeBody(request, settings.contextWindow));
}
