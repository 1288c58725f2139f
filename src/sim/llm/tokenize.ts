import type { Flavor, ReplicaInfo, RouteAnswer } from './flavor.js';
import { absent, type BadField, isObject, isSimError, parseMessages, type SimError } from './protocol.js';
import { renderChatPrompt, tokenId, tokenize } from './text.js';
import type { ToolDialect } from './tools.js';

/**
 * `POST /tokenize`. vLLM's two shapes — `{prompt}` for raw text, `{messages}` rendered with the
 * chat template, so the count is what a chat completion would report as prompt_tokens — and
 * llama.cpp's `{content}`, which the vLLM flavor understands too.
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

function optionalBoolean(body: Record<string, unknown>, name: string, bad: BadField): boolean | SimError {
  const value = body[name];
  if (absent(value)) return false;
  return typeof value === 'boolean' ? value : bad(`${name} must be a boolean`, name);
}

export function parseTokenizeRequest(
  body: unknown,
  bad: BadField,
  dialect: ToolDialect,
): TokenizeRequest | SimError {
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
  const withPieces = optionalBoolean(body, given[0] === 'content' ? 'with_pieces' : 'return_token_strs', bad);
  if (isSimError(withPieces)) return withPieces;

  if (given[0] === 'messages') {
    const messages = parseMessages(body.messages, bad, dialect);
    if (!Array.isArray(messages)) return messages;
    const generation = optionalBoolean(body, 'add_generation_prompt', bad);
    if (isSimError(generation)) return generation;
    const text = renderChatPrompt(messages, absent(body.add_generation_prompt) || generation);
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

/** vLLM's /tokenize: a model it does not serve is the same 404 as for chat completions. */
export function vllmTokenize(body: unknown, replica: ReplicaInfo, flavor: Flavor): RouteAnswer {
  const bad: BadField = (message, param) => flavor.error(400, message, param);
  const request = parseTokenizeRequest(body, bad, flavor.tools);
  if (isSimError(request)) return request;
  const unknown = flavor.checkModel(request.model, replica.model);
  if (unknown) return unknown;
  return { status: 200, json: tokenizeBody(request, replica.contextWindow) };
}

/**
 * llama.cpp's /tokenize reads only `content` (a body without it gets no tokens, as llama-server
 * answers one with `messages`), and `with_pieces`.
 */
export function llamaTokenize(body: unknown, flavor: Flavor): RouteAnswer {
  if (!isObject(body) || absent(body.content)) return { status: 200, json: { tokens: [] } };
  const bad: BadField = (message) => flavor.error(400, message);
  if (typeof body.content !== 'string') return bad('content must be a string', 'content');
  const withPieces = optionalBoolean(body, 'with_pieces', bad);
  if (isSimError(withPieces)) return withPieces;
  return {
    status: 200,
    json: tokenizeBody({ model: undefined, text: body.content, shape: 'llama.cpp', withPieces }, 0),
  };
}
