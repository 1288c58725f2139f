import { randomInt } from 'node:crypto';
import type { SimError } from './protocol.js';
import { renderToolCall, type ToolDialect, type ToolSpec } from './tools.js';

/**
 * llama-server's tool calling, as its code reads a request (oaicompat_chat_params_parse,
 * common_chat_tools_parse_oaicompat, common_chat_msgs_parse_oaicompat). `tool_choice` is read as
 * a string, "auto" by default: one of "auto", "none" or "required", else a 400; any other JSON
 * type (the OpenAI object naming a function included) falls back to "auto" — llama-server cannot
 * force one named function. A malformed `tools` or message `tool_calls` throws a runtime_error,
 * which llama-server answers 500 `server_error`. Tool call ids are 32 random letters and digits,
 * arguments compact JSON as nlohmann dumps them, the finish reason "tool_calls".
 */

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** nlohmann::json's name for a value's type, as its exceptions word it. */
export function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'object') return 'object';
  return typeof value; // string, number, boolean
}

const typeError = (value: unknown) =>
  `[json.exception.type_error.302] type must be string, but is ${jsonType(value)}`;
const keyNotFound = (key: string) => `[json.exception.out_of_range.403] key '${key}' not found`;
const dump = (value: unknown) => JSON.stringify(value) ?? 'null';

const ID_ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export function llamaToolDialect(error: (status: number, message: string) => SimError): ToolDialect {
  /** Why a tool is malformed, as llama-server words it, or undefined. */
  function toolProblem(tool: unknown): string | undefined {
    if (!isObject(tool) || !Object.hasOwn(tool, 'type')) return `Missing tool type: ${dump(tool)}`;
    if (tool.type !== 'function') return `Unsupported tool type: ${dump(tool)}`;
    if (!Object.hasOwn(tool, 'function')) return `Missing tool function: ${dump(tool)}`;
    const fn = tool.function;
    if (!isObject(fn)) return `[json.exception.type_error.304] cannot use at() with ${jsonType(fn)}`;
    if (!Object.hasOwn(fn, 'name')) return keyNotFound('name');
    if (typeof fn.name !== 'string') return typeError(fn.name);
    if (Object.hasOwn(fn, 'description') && typeof fn.description !== 'string')
      return typeError(fn.description);
    return undefined;
  }

  /** Why a message's tool call is malformed, or its rendering. */
  function renderCall(call: unknown): { problem: string } | { text: string } {
    if (!isObject(call) || !Object.hasOwn(call, 'type'))
      return { problem: `Missing tool call type: ${dump(call)}` };
    if (call.type !== 'function') return { problem: `Unsupported tool call type: ${dump(call)}` };
    if (!Object.hasOwn(call, 'function')) return { problem: `Missing tool call function: ${dump(call)}` };
    const fn = call.function;
    if (!isObject(fn) || !Object.hasOwn(fn, 'name'))
      return { problem: `Missing tool call name: ${dump(call)}` };
    if (typeof fn.name !== 'string') return { problem: typeError(fn.name) };
    if (!Object.hasOwn(fn, 'arguments')) return { problem: keyNotFound('arguments') };
    if (Object.hasOwn(call, 'id') && typeof call.id !== 'string') return { problem: typeError(call.id) };
    // Arguments given as JSON rather than a JSON string are dumped.
    const args = typeof fn.arguments === 'string' ? fn.arguments : dump(fn.arguments);
    return { text: renderToolCall(fn.name, args) };
  }

  return {
    parseTools(body) {
      const tools = body.tools;
      const specs: ToolSpec[] = [];
      if (tools !== undefined && tools !== null) {
        const fail = (why: string) =>
          error(500, `Failed to parse tools: ${why}; tools = ${JSON.stringify(tools, null, 2)}`);
        if (!Array.isArray(tools)) return fail(`Expected 'tools' to be an array, got ${dump(tools)}`);
        for (const tool of tools) {
          const problem = toolProblem(tool);
          if (problem) return fail(problem);
          const fn = (tool as { function: { name: string; parameters?: unknown } }).function;
          specs.push({ name: fn.name, parameters: fn.parameters });
        }
      }
      const choice = typeof body.tool_choice === 'string' ? body.tool_choice : 'auto';
      if (choice !== 'auto' && choice !== 'none' && choice !== 'required') {
        return error(400, `Invalid tool_choice: ${choice}`);
      }
      return { tools: specs, choice };
    },

    renderCalls(calls) {
      // nlohmann iterates an object's values, and a single value as itself.
      const list = Array.isArray(calls) ? calls : isObject(calls) ? Object.values(calls) : [calls];
      let text = '';
      for (const call of list) {
        const rendered = renderCall(call);
        if ('problem' in rendered) return error(500, `Failed to parse messages: ${rendered.problem}`);
        text += rendered.text;
      }
      return text;
    },

    // llama-server does not need tool_call_id; when present it must be a string.
    checkToolMessage: (message) =>
      Object.hasOwn(message, 'tool_call_id') && typeof message.tool_call_id !== 'string'
        ? error(500, `Failed to parse messages: ${typeError(message.tool_call_id)}`)
        : undefined,

    callId: () => Array.from({ length: 32 }, () => ID_ALPHABET[randomInt(ID_ALPHABET.length)]).join(''),
    formatArguments: (value) => JSON.stringify(value),
    writesName: () => true,
    finishReason: () => 'tool_calls',
  };
}
