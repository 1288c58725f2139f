import { randomUUID } from 'node:crypto';
import type { SimError } from './protocol.js';
import {
  renderToolCall,
  type ToolChoice,
  type ToolDialect,
  type ToolSettings,
  type ToolSpec,
} from './tools.js';

/**
 * vLLM's tool calling (its OpenAI server as of 0.10, started with --enable-auto-tool-choice and a
 * tool parser): `check_tool_usage`'s checks and words, then pydantic's checks of the `tools` and
 * `tool_choice` fields; tool call ids `chatcmpl-tool-<hex>`; arguments as Python's json.dumps
 * writes them (`{"city": "Paris"}`); "tool_calls" as the finish reason, except for a named
 * tool_choice, which keeps "stop" (as OpenAI does), and whose name vLLM forces by guided decoding.
 */

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const absent = (value: unknown) => value === undefined || value === null;

/** A value as Python's repr() writes it, for messages that quote what the request sent. */
function repr(value: unknown): string {
  if (absent(value)) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'string') return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
  if (Array.isArray(value)) return `[${value.map(repr).join(', ')}]`;
  if (isObject(value))
    return `{${Object.entries(value)
      .map(([k, v]) => `${repr(k)}: ${repr(v)}`)
      .join(', ')}}`;
  return String(value);
}
/** Python's str() of a value inside an f-string: a string as it is, anything else its repr. */
const str = (value: unknown) => (typeof value === 'string' ? value : repr(value));

/** JSON as Python's json.dumps(value, ensure_ascii=False) writes it: ", " and ": " separators. */
export function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (isObject(value)) {
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`)
      .join(', ')}}`;
  }
  return JSON.stringify(value);
}

const USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`';

export function vllmToolDialect(
  error: (status: number, message: string, param: string) => SimError,
): ToolDialect {
  const bad = (message: string, param: string) => error(400, message, param);

  /** vLLM's check_tool_usage, which runs before the fields are validated: the choice, or a 400. */
  function checkToolUsage(body: Record<string, unknown>): { choice: unknown } | SimError {
    const tools = body.tools;
    if (!Object.hasOwn(body, 'tool_choice')) {
      return { choice: (Array.isArray(tools) ? tools.length > 0 : !absent(tools)) ? 'auto' : 'none' };
    }
    const choice = body.tool_choice;
    if (absent(choice) || choice === 'none') return { choice };
    if (absent(tools)) return bad('When using `tool_choice`, `tools` must be set.', 'tool_choice');
    if (choice !== 'auto' && choice !== 'required' && !isObject(choice)) {
      return bad(
        `Invalid value for \`tool_choice\`: ${str(choice)}! Only named tools, "none", "auto" or "required" are supported.`,
        'tool_choice',
      );
    }
    // As OpenAI does: "required" with no tools is "none".
    if (choice === 'required' && Array.isArray(tools) && tools.length === 0) return { choice: 'none' };
    if (!isObject(choice)) return { choice };
    const fn = choice.function;
    if (!isObject(fn)) {
      return bad(
        `Invalid value for \`function\`: \`${str(fn)}\` in \`tool_choice\`! ${USAGE}`,
        'tool_choice.function',
      );
    }
    if (!Object.hasOwn(fn, 'name')) {
      return bad(
        `Expected field \`name\` in \`function\` in \`tool_choice\`! ${USAGE}`,
        'tool_choice.function.name',
      );
    }
    if (typeof fn.name !== 'string' || fn.name === '') {
      return bad(
        `Invalid \`name\` in \`function\`: \`${str(fn.name)}\` in \`tool_choice\`! ${USAGE}`,
        'tool_choice.function.name',
      );
    }
    const listed = Array.isArray(tools) ? tools : [];
    if (!listed.some((t) => isObject(t) && isObject(t.function) && t.function.name === fn.name)) {
      return bad(
        'The tool specified in `tool_choice` does not match any of the specified `tools`',
        'tool_choice',
      );
    }
    return { choice };
  }

  /** The `tools` field as pydantic validates it: a list of function tools. */
  function parseToolList(tools: unknown): ToolSpec[] | SimError {
    if (absent(tools)) return [];
    if (!Array.isArray(tools)) return bad('tools must be an array of function tools', 'tools');
    const specs: ToolSpec[] = [];
    for (const [i, tool] of tools.entries()) {
      const at = `tools[${i}]`;
      if (!isObject(tool)) return bad(`${at} must be an object`, at);
      if (Object.hasOwn(tool, 'type') && tool.type !== 'function') {
        return bad(`${at}.type must be "function", got ${JSON.stringify(tool.type)}`, `${at}.type`);
      }
      const fn = tool.function;
      if (!isObject(fn)) return bad(`${at}.function must be an object with a name`, `${at}.function`);
      if (typeof fn.name !== 'string')
        return bad(`${at}.function.name must be a string`, `${at}.function.name`);
      if (!absent(fn.description) && typeof fn.description !== 'string') {
        return bad(`${at}.function.description must be a string`, `${at}.function.description`);
      }
      if (!absent(fn.parameters) && !isObject(fn.parameters)) {
        return bad(
          `${at}.function.parameters must be an object (a JSON Schema)`,
          `${at}.function.parameters`,
        );
      }
      specs.push({ name: fn.name, parameters: fn.parameters });
    }
    return specs;
  }

  return {
    parseTools(body): ToolSettings | SimError {
      const usage = checkToolUsage(body);
      if (!('choice' in usage)) return usage;
      const checked = usage.choice;
      const tools = parseToolList(body.tools);
      if (!Array.isArray(tools)) return tools;
      let choice: ToolChoice;
      if (isObject(checked)) {
        if (Object.hasOwn(checked, 'type') && checked.type !== 'function') {
          return bad('tool_choice.type must be "function"', 'tool_choice.type');
        }
        choice = { name: (checked.function as { name: string }).name };
      } else {
        choice = absent(checked) ? 'none' : (checked as ToolChoice);
      }
      return { tools, choice };
    },

    renderCalls(calls, at) {
      const param = `${at}.tool_calls`;
      if (!Array.isArray(calls)) return bad(`${param} must be an array`, param);
      let text = '';
      for (const [j, call] of calls.entries()) {
        const fn = isObject(call) ? call.function : undefined;
        if (
          !isObject(call) ||
          typeof call.id !== 'string' ||
          call.type !== 'function' ||
          !isObject(fn) ||
          typeof fn.name !== 'string' ||
          typeof fn.arguments !== 'string'
        ) {
          return bad(
            `${param}[${j}] must be {"id": string, "type": "function", "function": {"name": string, "arguments": string}}`,
            param,
          );
        }
        text += renderToolCall(fn.name, fn.arguments);
      }
      return text;
    },

    // vLLM's parser lets a tool message without tool_call_id through; the chat template or
    // tokenizer then decides (Mistral's refuses it). The simulated model's needs the id.
    checkToolMessage: (message, at) =>
      typeof message.tool_call_id === 'string'
        ? undefined
        : bad(`${at}: a tool message needs a tool_call_id (a string)`, `${at}.tool_call_id`),

    callId: () => `chatcmpl-tool-${randomUUID().replaceAll('-', '')}`,
    formatArguments: pythonJson,
    writesName: (mode) => mode !== 'named',
    finishReason: (mode) => (mode === 'named' ? 'stop' : 'tool_calls'),
  };
}
