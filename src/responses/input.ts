import type { ChatMessage } from '../engines/types.js';
import { type ErrorDetail, validationError } from '../errors.js';
import type { Item, ResponseBody } from './schema.js';

/** OpenAI's hosted tools: Kiln's engines run none of them. */
const HOSTED_TOOLS = new Set([
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'file_search',
  'code_interpreter',
  'computer_use_preview',
  'computer_use',
  'image_generation',
  'mcp',
  'local_shell',
  'shell',
  'apply_patch',
  'custom',
]);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const ROLES = new Set(['user', 'assistant', 'system', 'developer']);

/** Collects every problem with the body, so the caller sees them all in one 400. */
class Problems {
  readonly list: ErrorDetail[] = [];
  add(field: string, rule: string, message: string, received?: unknown): undefined {
    this.list.push({ field, rule, message, ...(received === undefined ? {} : { received }) });
    return undefined;
  }
  throwIfAny(): void {
    if (this.list.length > 0) throw validationError(this.list);
  }
}

/**
 * A message's content as items store it: a string, or parts (`input_text`, `input_image`, and an
 * earlier answer's `output_text` and `refusal`).
 */
function messageContent(content: unknown, at: string, problems: Problems): unknown {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content))
    return problems.add(at, 'type', `${at} must be a string or an array of content parts`);
  for (const [i, part] of content.entries()) {
    const where = `${at}[${i}]`;
    const type = isObject(part) ? part.type : undefined;
    if (type === 'input_text' || type === 'output_text' || type === 'refusal') {
      const field = type === 'refusal' ? 'refusal' : 'text';
      if (typeof (part as Record<string, unknown>)[field] !== 'string')
        problems.add(`${where}.${field}`, 'type', `${where} needs a string ${field}`);
    } else if (type === 'input_image') {
      const url = (part as Record<string, unknown>).image_url;
      if (typeof url !== 'string' || url === '') {
        problems.add(
          `${where}.image_url`,
          'required',
          `${where}: an input_image needs image_url (an https URL or a data: URL); file_id images need OpenAI's Files API, which Kiln does not have`,
        );
      }
    } else if (type === 'input_file' || type === 'input_audio') {
      problems.add(
        `${where}.type`,
        'unsupported',
        `${where}: ${type} parts are not supported by Kiln's chat engines; send the text as input_text`,
        type,
      );
    } else {
      problems.add(
        `${where}.type`,
        'enum',
        `${where}.type must be input_text, input_image, output_text or refusal`,
        shownType(type),
      );
    }
  }
  return content;
}

/**
 * A function call's output: a string, or text parts. OpenAI's API also takes image and file parts
 * there, which a chat engine's tool message cannot carry: refused, not dropped.
 */
function toolOutput(output: unknown, at: string, problems: Problems): void {
  if (typeof output === 'string') return;
  if (!Array.isArray(output)) {
    problems.add(
      at,
      'required',
      `${at}: a function_call_output needs its output, a string or input_text parts`,
    );
    return;
  }
  for (const [i, part] of output.entries()) {
    const where = `${at}[${i}]`;
    const type = isObject(part) ? part.type : undefined;
    if (type === 'input_text') {
      if (typeof (part as Record<string, unknown>).text !== 'string')
        problems.add(`${where}.text`, 'type', `${where} needs a string text`);
    } else if (type === 'input_image' || type === 'input_file') {
      problems.add(
        `${where}.type`,
        'unsupported',
        `${where}: ${type} parts in a function's output are not supported: a chat engine's tool message carries text only`,
        type,
      );
    } else {
      problems.add(`${where}.type`, 'enum', `${where}.type must be input_text`, shownType(type));
    }
  }
}

/** The item's own id, when the caller gave one; the others get theirs when listed (input_items). */
const idOf = (raw: Record<string, unknown>) =>
  typeof raw.id === 'string' && raw.id !== '' ? { id: raw.id } : {};

const shownType = (type: unknown) => (typeof type === 'string' ? type : typeof type);

/** The caller's `input` as items, checked: what the job stores and `input_items` lists. */
export function inputItems(input: ResponseBody['input'], problems = new Problems()): Item[] {
  if (input === undefined) return [];
  if (typeof input === 'string') {
    return [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: input }] }];
  }
  const items: Item[] = [];
  for (const [i, raw] of input.entries()) {
    const at = `input[${i}]`;
    // Without a type, an item is a message, or (OpenAI's ItemReferenceParam) a reference: an id alone.
    const type =
      raw.type ??
      (raw.role === undefined && raw.content === undefined && 'id' in raw ? 'item_reference' : 'message');
    if (type === 'message') {
      const role = raw.role;
      if (typeof role !== 'string' || !ROLES.has(role)) {
        problems.add(`${at}.role`, 'enum', `${at}.role must be user, assistant, system or developer`, role);
        continue;
      }
      const content = messageContent(raw.content, `${at}.content`, problems);
      const parts =
        typeof content === 'string'
          ? [{ type: role === 'assistant' ? 'output_text' : 'input_text', text: content }]
          : content;
      items.push({ type: 'message', ...idOf(raw), role, content: parts });
    } else if (type === 'function_call') {
      for (const field of ['call_id', 'name', 'arguments'] as const) {
        if (typeof raw[field] !== 'string')
          problems.add(`${at}.${field}`, 'required', `${at}: a function_call needs a string ${field}`);
      }
      items.push({
        type,
        ...idOf(raw),
        call_id: raw.call_id,
        name: raw.name,
        arguments: raw.arguments,
        status: 'completed',
      });
    } else if (type === 'function_call_output') {
      if (typeof raw.call_id !== 'string')
        problems.add(
          `${at}.call_id`,
          'required',
          `${at}: a function_call_output needs the call_id of its call`,
        );
      toolOutput(raw.output, `${at}.output`, problems);
      items.push({
        type,
        ...idOf(raw),
        call_id: raw.call_id,
        output: raw.output,
        status: 'completed',
      });
    } else if (type === 'reasoning') {
      // A reasoning item from an earlier turn (OpenAI's reasoning models): nothing an engine takes back.
    } else if (type === 'item_reference') {
      // Resolved against the stored responses before the job is made (items.ts).
      if (typeof raw.id === 'string') items.push({ type, id: raw.id });
      else problems.add(`${at}.id`, 'required', `${at}: an item_reference needs the id of the item`);
    } else {
      problems.add(
        `${at}.type`,
        'unsupported',
        `${at}: items of type '${shownType(type)}' are not supported; Kiln takes message, function_call, function_call_output and item_reference items`,
        shownType(type),
      );
    }
  }
  return items;
}

/**
 * The Responses request's tools, tool choice and text format, checked and put the chat-completions
 * way. A hosted tool (web search, file search, code interpreter…) is refused by name.
 */
export function chatFields(body: ResponseBody, problems: Problems): Record<string, unknown> {
  const chat: Record<string, unknown> = {};
  if (body.tools && body.tools.length > 0) {
    chat.tools = body.tools.map((tool, i) => {
      const at = `tools[${i}]`;
      if (tool.type !== 'function') {
        const hosted = HOSTED_TOOLS.has(tool.type);
        return problems.add(
          `${at}.type`,
          'unsupported',
          hosted
            ? `${at}: '${tool.type}' is one of OpenAI's hosted tools; Kiln's engines run none of them, only function tools`
            : `${at}.type '${tool.type}' is not a tool Kiln knows; only function tools are supported`,
          tool.type,
        );
      }
      if (typeof tool.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(tool.name)) {
        return problems.add(
          `${at}.name`,
          'pattern',
          `${at}.name must be 1–64 letters, digits, _ or -`,
          tool.name,
        );
      }
      if (tool.parameters !== undefined && tool.parameters !== null && !isObject(tool.parameters)) {
        return problems.add(`${at}.parameters`, 'type', `${at}.parameters must be a JSON schema object`);
      }
      for (const [field, type] of [
        ['strict', 'boolean'],
        ['description', 'string'],
      ] as const) {
        const value = (tool as Record<string, unknown>)[field];
        if (value !== undefined && value !== null && typeof value !== type)
          return problems.add(`${at}.${field}`, 'type', `${at}.${field} must be a ${type}`, value);
      }
      const fn: Record<string, unknown> = { name: tool.name };
      if (typeof tool.description === 'string') fn.description = tool.description;
      if (isObject(tool.parameters)) fn.parameters = tool.parameters;
      if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
      return { type: 'function', function: fn };
    });
  }
  const choice = body.tool_choice;
  if (choice !== undefined) {
    if (typeof choice === 'string') {
      if (!['none', 'auto', 'required'].includes(choice)) {
        problems.add(
          'tool_choice',
          'enum',
          'tool_choice must be none, auto, required or {"type": "function", "name": …}',
          choice,
        );
      } else chat.tool_choice = choice;
    } else if (choice.type === 'function' && typeof choice.name === 'string') {
      const name = choice.name;
      if (!body.tools?.some((tool) => tool.type === 'function' && tool.name === name)) {
        problems.add(
          'tool_choice.name',
          'exists',
          `tool_choice names '${name}', which is not among the tools`,
          name,
        );
      }
      chat.tool_choice = { type: 'function', function: { name } };
    } else if (choice.type === 'function') {
      problems.add('tool_choice.name', 'required', 'tool_choice of type function needs the name of a tool');
    } else {
      problems.add(
        'tool_choice',
        'unsupported',
        `tool_choice of type '${choice.type}' is not supported; use none, auto, required or a function`,
        choice.type,
      );
    }
  }
  // Without tools, `auto` and `none` choose nothing (OpenAI takes them so, and engines refuse a
  // choice without tools); `required` cannot be met.
  if (!chat.tools && chat.tool_choice !== undefined) {
    if (chat.tool_choice === 'required')
      problems.add('tool_choice', 'tools', "tool_choice 'required' needs tools to choose from", 'required');
    delete chat.tool_choice;
  }
  if (typeof body.parallel_tool_calls === 'boolean' && chat.tools)
    chat.parallel_tool_calls = body.parallel_tool_calls;
  const format = body.text?.format;
  if (format?.type === 'json_object') chat.response_format = { type: 'json_object' };
  if (format?.type === 'json_schema') {
    if (!format.name || !format.schema) {
      problems.add('text.format', 'required', 'a json_schema text format needs a name and a schema');
    }
    chat.response_format = {
      type: 'json_schema',
      json_schema: {
        name: format.name,
        schema: format.schema,
        ...(format.description === undefined ? {} : { description: format.description }),
        ...(typeof format.strict === 'boolean' ? { strict: format.strict } : {}),
      },
    };
  }
  if (typeof body.max_output_tokens === 'number') chat.max_tokens = body.max_output_tokens;
  if (typeof body.temperature === 'number') chat.temperature = body.temperature;
  if (typeof body.top_p === 'number') chat.top_p = body.top_p;
  if (typeof body.user === 'string') chat.user = body.user;
  return chat;
}

export { Problems };

/**
 * The function outputs among `items` from index `own` on (this turn's input, after the conversation
 * before it) that answer no function call made before them: OpenAI refuses those too, and a chat
 * engine would get a tool message that follows no call.
 */
export function unmatchedOutputs(items: readonly Item[], own: number): ErrorDetail[] {
  const calls = new Set<unknown>();
  const problems: ErrorDetail[] = [];
  for (const [index, item] of items.entries()) {
    if (item.type === 'function_call') calls.add(item.call_id);
    else if (item.type === 'function_call_output' && index >= own && !calls.has(item.call_id)) {
      const at = `input[${index - own}].call_id`;
      problems.push({
        field: at,
        rule: 'exists',
        message: `${at}: no function_call before this output has call_id '${String(item.call_id)}'`,
        received: item.call_id,
      });
    }
  }
  return problems;
}

/** A content part as chat completions take it. */
function chatPart(part: Record<string, unknown>): Record<string, unknown> {
  if (part.type === 'input_image') {
    return {
      type: 'image_url',
      image_url: { url: part.image_url, ...(typeof part.detail === 'string' ? { detail: part.detail } : {}) },
    };
  }
  // An earlier answer's refusal is what the assistant said: open models' chat templates render a
  // message's content and not a `refusal` field, so sent there it would be an empty turn.
  return { type: 'text', text: part.type === 'refusal' ? part.refusal : part.text };
}

/**
 * Items, in order, as chat messages: a message keeps its role (`developer` becomes `system`, which
 * every engine's template knows), consecutive function calls become one assistant message with
 * `tool_calls`, and each call's output a `tool` message. `origins`, if given, gets the index of the
 * item each message begins with.
 */
export function chatMessages(items: readonly Item[], origins?: number[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  for (const [index, item] of items.entries()) {
    const push = (message: ChatMessage) => {
      messages.push(message);
      origins?.push(index);
    };
    if (item.type === 'message') {
      const parts = item.content as Array<Record<string, unknown>>;
      const role = item.role === 'developer' ? 'system' : (item.role as string);
      const textOnly = parts.every((p) => p.type !== 'input_image');
      push({
        role,
        // Text alone goes as a string: every engine and chat template takes that.
        content: textOnly ? parts.map((p) => chatPart(p).text).join('') : parts.map(chatPart),
      });
    } else if (item.type === 'function_call') {
      const call = {
        id: item.call_id,
        type: 'function',
        function: { name: item.name, arguments: item.arguments },
      };
      // The calls of one turn, and the text before them, are one assistant message.
      const last = messages.at(-1);
      if (last?.role === 'assistant') last.tool_calls = [...((last.tool_calls as unknown[]) ?? []), call];
      else push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (item.type === 'function_call_output') {
      const output = item.output;
      const content = Array.isArray(output)
        ? output.map((p) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('')
        : output;
      push({ role: 'tool', tool_call_id: item.call_id, content });
    }
  }
  return messages;
}
