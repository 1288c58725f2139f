import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  expectValidDeletedResponse,
  expectValidInputItemList,
  expectValidResponse,
  expectValidStreamEvent,
  isValidByOpenAISchema,
  type ResponsesSchema,
} from '../helpers/openai-schema.js';

/**
 * The Responses API tests judge Kiln's answers by OpenAI's published schemas through these
 * helpers. A checker that lets everything through would make every one of those tests pass
 * vacuously, so this file proves it accepts what OpenAI answers and rejects what it does not.
 */

const message = {
  type: 'message',
  id: 'msg_67ccd3acc8d48190a77525dc6de64b4104becb25c0c8a6a1',
  status: 'completed',
  role: 'assistant',
  content: [{ type: 'output_text', text: 'hi', annotations: [], logprobs: [] }],
};

const functionCall = {
  type: 'function_call',
  id: 'fc_67ccd3acc8d48190a77525dc6de64b41',
  call_id: 'call_12345xyz',
  name: 'get_weather',
  arguments: '{"location":"Paris"}',
  status: 'completed',
};

/** A finished Response as OpenAI writes one: every field the schema requires, and usage. */
function response(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: 'resp_67ccd3a9da748190baa7f1570fe91ac604becb25c0c8a6a1',
    object: 'response',
    created_at: 1741476777,
    status: 'completed',
    completed_at: 1741476778,
    error: null,
    incomplete_details: null,
    instructions: null,
    model: 'llama-3.1-8b-instruct',
    output: [message],
    parallel_tool_calls: true,
    tool_choice: 'auto',
    tools: [],
    temperature: 1,
    top_p: 1,
    metadata: {},
    usage: {
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 1,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 13,
    },
    ...overrides,
  };
}

const item = { type: 'message', id: message.id, status: 'in_progress', role: 'assistant', content: [] };
const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
const at = { item_id: message.id, output_index: 0, content_index: 0 };
/** A response as the stream opens: no output, no usage yet. */
const started = (status: string) => without(response({ status, output: [], completed_at: null }), 'usage');

/** One of each event Kiln streams, in the order a text answer streams them. */
const events = [
  { type: 'response.queued', response: started('queued') },
  { type: 'response.created', response: started('in_progress') },
  { type: 'response.in_progress', response: started('in_progress') },
  { type: 'response.output_item.added', output_index: 0, item },
  { type: 'response.content_part.added', ...at, part },
  { type: 'response.output_text.delta', ...at, delta: 'hi', logprobs: [] },
  { type: 'response.output_text.done', ...at, text: 'hi', logprobs: [] },
  { type: 'response.content_part.done', ...at, part: { ...part, text: 'hi' } },
  { type: 'response.output_item.done', output_index: 0, item: message },
  {
    type: 'response.function_call_arguments.delta',
    item_id: functionCall.id,
    output_index: 0,
    delta: '{"lo',
  },
  {
    type: 'response.function_call_arguments.done',
    item_id: functionCall.id,
    output_index: 0,
    name: 'get_weather',
    arguments: functionCall.arguments,
  },
  { type: 'response.completed', response: response() },
  {
    type: 'response.failed',
    response: response({
      status: 'failed',
      error: { code: 'server_error', message: 'engine unreachable' },
    }),
  },
  {
    type: 'response.incomplete',
    response: response({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } }),
  },
  { type: 'error', code: 'server_error', message: 'engine unreachable', param: null },
];

const userMessage = {
  type: 'message',
  id: 'msg_abc123',
  role: 'user',
  status: 'completed',
  content: [
    { type: 'input_text', text: 'What is in this picture?' },
    { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'auto' },
  ],
};
const callOutput = {
  type: 'function_call_output',
  id: 'fco_abc123',
  call_id: functionCall.call_id,
  output: '{"temperature":21}',
  status: 'completed',
};
const list = (data: unknown[]) => ({
  object: 'list',
  data,
  first_id: 'msg_abc123',
  last_id: 'fco_abc123',
  has_more: false,
});

function without(body: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _dropped, ...rest } = body;
  return rest;
}

describe('expectValidResponse', () => {
  it('accepts a finished text answer', () => {
    expect(() => expectValidResponse(response())).not.toThrow();
  });

  it('accepts a function call with its tool, and an answer still in progress', () => {
    const tool = {
      type: 'function',
      name: 'get_weather',
      description: null,
      parameters: { type: 'object', properties: { location: { type: 'string' } } },
      strict: true,
    };
    expect(() => expectValidResponse(response({ output: [functionCall], tools: [tool] }))).not.toThrow();
    const started = without(response({ status: 'in_progress', output: [], completed_at: null }), 'usage');
    expect(() => expectValidResponse(started)).not.toThrow();
  });

  it('rejects a chat completion passed off as a response', () => {
    expect(() => expectValidResponse(response({ object: 'chat.completion' }))).toThrow(
      /\/object: must be equal to one of the allowed values \("response"\); got "chat.completion"/,
    );
  });

  it('rejects an answer without an id', () => {
    expect(() => expectValidResponse(without(response(), 'id'))).toThrow(/must have required property 'id'/);
  });

  it('rejects a status OpenAI does not have', () => {
    expect(() => expectValidResponse(response({ status: 'done' }))).toThrow(/\/status: must be equal to one/);
  });

  it('rejects nulls where the schema wants a field left out, and leaving out a nullable field', () => {
    expect(() => expectValidResponse(response({ usage: null }))).toThrow(/\/usage: must be object/);
    expect(() => expectValidResponse(without(response(), 'temperature'))).toThrow(/'temperature'/);
  });

  it('rejects an output item of an unknown type, naming the known ones', () => {
    const odd = { ...message, type: 'thought' };
    expect(() => expectValidResponse(response({ output: [odd] }))).toThrow(
      /\/output\/0\/type: must be equal to one of the allowed values \("message", .*"function_call"/,
    );
  });

  it("reports a broken output item by its own type's rules only", () => {
    const broken = { ...message, content: [{ type: 'output_text', text: 'hi', logprobs: [] }] };
    let thrown: unknown;
    try {
      expectValidResponse(response({ output: [broken] }));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(Error);
    const lines = (thrown as Error).message.split('\n').slice(1);
    expect(lines).toEqual(["  /output/0/content/0: must have required property 'annotations'"]);
  });

  it('rejects a function call without its call_id', () => {
    const output = [without(functionCall, 'call_id')];
    expect(() => expectValidResponse(response({ output }))).toThrow(
      /\/output\/0: must have required property 'call_id'/,
    );
  });
});

describe('expectValidStreamEvent', () => {
  it.each(events.map((event, i) => ({ ...event, sequence_number: i })))('accepts $type', (event) => {
    expect(() => expectValidStreamEvent(event)).not.toThrow();
  });

  it('rejects an event without its sequence_number', () => {
    const delta = { type: 'response.output_text.delta', ...at, delta: 'hi', logprobs: [] };
    expect(() => expectValidStreamEvent(delta)).toThrow(
      /^not a valid response.output_text.delta event by OpenAI's schema:\n {2}\(root\): must have required property 'sequence_number'$/,
    );
  });

  it('rejects a type OpenAI does not stream, and a value that is no event', () => {
    expect(() => expectValidStreamEvent({ type: 'response.output_text', sequence_number: 1 })).toThrow(
      /type "response.output_text" is none of .*response.output_text.delta/,
    );
    expect(() => expectValidStreamEvent('data: [DONE]')).toThrow(/type undefined is none of/);
  });

  it('checks the response an event carries', () => {
    const created = { type: 'response.created', sequence_number: 0, response: without(response(), 'model') };
    expect(() => expectValidStreamEvent(created)).toThrow(/\/response: must have required property 'model'/);
  });
});

describe('expectValidDeletedResponse', () => {
  it('accepts what OpenAI documents and rejects a chat completion deletion', () => {
    expect(() =>
      expectValidDeletedResponse({ id: 'resp_1', object: 'response', deleted: true }),
    ).not.toThrow();
    expect(() =>
      expectValidDeletedResponse({ id: 'resp_1', object: 'chat.completion.deleted', deleted: true }),
    ).toThrow(/\/object/);
    expect(() => expectValidDeletedResponse({ id: 'resp_1', object: 'response' })).toThrow(/'deleted'/);
  });
});

describe('expectValidInputItemList', () => {
  it('accepts user messages with text and images, function calls and their outputs', () => {
    expect(() => expectValidInputItemList(list([userMessage, functionCall, callOutput]))).not.toThrow();
  });

  it('rejects an image part without its detail, and a function output without its id', () => {
    const noDetail = {
      ...userMessage,
      content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }],
    };
    expect(() => expectValidInputItemList(list([noDetail]))).toThrow(
      /\/data\/0\/content\/0: must have required property 'detail'/,
    );
    expect(() => expectValidInputItemList(list([without(callOutput, 'id')]))).toThrow(
      /\/data\/0: must have required property 'id'/,
    );
  });

  it('rejects a list that is not a list', () => {
    expect(() => expectValidInputItemList({ ...list([]), object: 'response' })).toThrow(/\/object/);
  });
});

describe('the dispatch on type', () => {
  type Path = (string | number)[];

  /** Every place in `value` a mutation can touch. */
  function paths(value: unknown, at: Path = []): Path[] {
    if (Array.isArray(value)) return value.flatMap((item, i) => [[...at, i], ...paths(item, [...at, i])]);
    if (typeof value !== 'object' || value === null) return [];
    return Object.entries(value).flatMap(([key, item]) => [[...at, key], ...paths(item, [...at, key])]);
  }

  function mutate(value: unknown, path: Path, replacement: unknown, remove: boolean): unknown {
    const copy = structuredClone(value);
    let parent = copy as Record<string | number, unknown>;
    for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
    const last = path[path.length - 1] as string | number;
    if (remove && !Array.isArray(parent)) delete parent[last];
    else parent[last] = replacement;
    return copy;
  }

  const samples: [ResponsesSchema, unknown][] = [
    ['Response', response({ output: [message, functionCall] })],
    ...events.map((event, i): [ResponsesSchema, unknown] => [
      'ResponseStreamEvent',
      { ...event, sequence_number: i },
    ]),
    ['ResponseItemList', list([userMessage, functionCall, callOutput, message])],
    ['DeletedResponse', { id: 'resp_1', object: 'response', deleted: true }],
  ];
  // Other members' types and whole other items, so that mutants cross from one member to another.
  const types = ['message', 'function_call', 'function_call_output', 'output_text', 'refusal', 'input_text'];
  const pieces = [message, functionCall, callOutput, userMessage, part, item, ...userMessage.content];

  it('accepts and rejects exactly what the unions as published accept and reject', () => {
    const mutant = fc
      .record({
        sample: fc.constantFrom(...samples),
        pick: fc.nat(),
        remove: fc.boolean(),
        replacement: fc.oneof(fc.constantFrom(...types, ...pieces), fc.jsonValue({ maxDepth: 2 })),
      })
      .map(({ sample: [schema, body], pick, remove, replacement }) => {
        const places = paths(body);
        const path = places[pick % places.length] as Path;
        return { schema, body: mutate(body, path, replacement, remove) };
      });
    const verdicts = fc.sample(mutant, { numRuns: 400, seed: 7 }).map(({ schema, body }) => {
      const dispatched = isValidByOpenAISchema(schema, body);
      expect(isValidByOpenAISchema(schema, body, { published: true }), JSON.stringify(body)).toBe(dispatched);
      return dispatched;
    });
    // Both verdicts occur, or the comparison above would prove nothing.
    expect(verdicts.filter(Boolean).length).toBeGreaterThan(20);
    expect(verdicts.filter((valid) => !valid).length).toBeGreaterThan(100);
  });
});
