import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FlavorName, type LlmSim, startLlmSim } from '../../src/sim/llm/server.js';
import { countTokens, tokenize } from '../../src/sim/llm/text.js';

/**
 * Function tool calling in both flavors of the LLM simulator, driven over HTTP (and with the real
 * openai client): when the model calls a tool and which, the call's arguments, its non-stream and
 * streamed shapes, the round trip through a tool result, and the requests each engine refuses.
 */

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
    },
  },
} as const;
const CLOCK = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: {} } },
};
const ASK = 'What is the weather in Paris today? Please use get_weather.';
const SYSTEM = `You are a careful assistant. ${'Answer from the tools you are given. '.repeat(12)}`;
const messages = (user = ASK) => [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: user },
];

interface Answer {
  status: number;
  body: any;
}

async function chat(sim: LlmSim, body: Record<string, unknown>): Promise<Answer> {
  const res = await fetch(`${sim.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!body.stream || res.status !== 200) return { status: res.status, body: JSON.parse(text) };
  expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  const events = text.slice(0, -2).split('\n\n').slice(0, -1);
  return { status: res.status, body: events.map((e) => JSON.parse(e.slice('data: '.length))) };
}

/** The arguments each flavor writes: vLLM as Python's json.dumps, llama.cpp as nlohmann's dump. */
const ARGUMENTS: Record<FlavorName, string> = {
  vllm: '{"city": "Paris", "unit": "celsius"}',
  'llama.cpp': '{"city":"Paris","unit":"celsius"}',
};
const CALL_ID: Record<FlavorName, RegExp> = {
  vllm: /^chatcmpl-tool-[0-9a-f]{32}$/,
  'llama.cpp': /^[0-9A-Za-z]{32}$/,
};
/** The model writes the function's name, then the arguments, token by token. */
const callTokens = (flavor: FlavorName) => countTokens('get_weather') + countTokens(ARGUMENTS[flavor]);

/** The assistant message of an answer's first choice, without vLLM's always-null extras. */
function message(body: any) {
  const { refusal, annotations, audio, function_call, reasoning_content, ...rest } = body.choices[0].message;
  return rest;
}

const sims = {} as Record<FlavorName, LlmSim>;
beforeAll(async () => {
  for (const flavor of ['vllm', 'llama.cpp'] as const) {
    sims[flavor] = await startLlmSim({ flavor, decodeMsPerToken: 0, maxTokensDefault: 200 });
  }
});
afterAll(async () => Promise.all(Object.values(sims).map((sim) => sim.close())));

describe.each(['vllm', 'llama.cpp'] as const)('tool calls, %s flavor', (flavor) => {
  const request = (extra: Record<string, unknown> = {}) => ({
    messages: messages(),
    tools: [WEATHER],
    ...extra,
  });

  it('answers a call when the user names the tool: content null, finish_reason tool_calls', async () => {
    const { status, body } = await chat(sims[flavor], request({ seed: 3 }));
    expect(status).toBe(200);
    const call = { name: 'get_weather', arguments: ARGUMENTS[flavor] };
    const id = expect.stringMatching(CALL_ID[flavor]);
    expect(message(body)).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [
        flavor === 'vllm'
          ? { id, type: 'function', function: call }
          : { type: 'function', function: call, id },
      ],
    });
    if (flavor === 'vllm') expect(body.choices[0].message.reasoning_content).toBeNull();
    expect(body.choices[0].finish_reason).toBe('tool_calls');
    expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris', unit: 'celsius' });
    expect(body.usage.completion_tokens).toBe(callTokens(flavor));
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + callTokens(flavor));
  });

  it('streams the call: role, the call with its name, the arguments token by token, finish, usage', async () => {
    const whole = await chat(sims[flavor], request({ seed: 3 }));
    const { status, body: events } = await chat(
      sims[flavor],
      request({ seed: 3, stream: true, stream_options: { include_usage: true } }),
    );
    expect(status).toBe(200);
    const deltas = events.filter((e: any) => e.choices.length > 0).map((e: any) => e.choices[0].delta);
    expect(deltas[0]).toEqual({ role: 'assistant', content: flavor === 'vllm' ? '' : null });
    const id = deltas[1].tool_calls[0].id;
    expect(id).toMatch(CALL_ID[flavor]);
    // vLLM's DeltaToolCall fields in its order (id, type, index, function); llama.cpp's diff order.
    expect(JSON.stringify(deltas[1])).toBe(
      flavor === 'vllm'
        ? JSON.stringify({
            tool_calls: [{ id, type: 'function', index: 0, function: { name: 'get_weather' } }],
          })
        : JSON.stringify({
            tool_calls: [{ index: 0, id, type: 'function', function: { name: 'get_weather' } }],
          }),
    );
    const pieces = deltas.slice(2, -1).map((d: any) => {
      expect(d).toEqual({ tool_calls: [{ index: 0, function: { arguments: expect.any(String) } }] });
      return d.tool_calls[0].function.arguments;
    });
    expect(pieces).toEqual(tokenize(ARGUMENTS[flavor]));
    expect(pieces.join('')).toBe(whole.body.choices[0].message.tool_calls[0].function.arguments);
    expect(JSON.parse(pieces.join(''))).toEqual({ city: 'Paris', unit: 'celsius' });
    expect(deltas.at(-1)).toEqual({});
    expect(events.at(-2).choices[0].finish_reason).toBe('tool_calls');
    expect(events.at(-1).choices).toEqual([]);
    expect(events.at(-1).usage.completion_tokens).toBe(whole.body.usage.completion_tokens);
  });

  it('round trip: the assistant call and the tool result count in the prompt, and the model answers text', async () => {
    const sim = sims[flavor];
    sim.resetPrefixCache();
    const first = await chat(sim, request());
    const call = first.body.choices[0].message.tool_calls[0];
    const output = '{"temperature": 18, "sky": "clear"}';
    const history = [
      ...messages(),
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: output },
    ];
    const second = await chat(sim, { messages: history, tools: [WEATHER] });
    expect(second.status).toBe(200);
    const answer = second.body.choices[0];
    expect(answer.finish_reason).toBe('stop');
    expect(answer.message.content).toMatch(/^[A-Z].*\.$/);
    expect(answer.message.tool_calls ?? []).toEqual([]);
    // The call's arguments and the tool's output are prompt text like any message's ...
    const grew = second.body.usage.prompt_tokens - first.body.usage.prompt_tokens;
    expect(grew).toBeGreaterThan(countTokens(call.function.arguments) + countTokens(output));
    const counted = await fetch(`${sims.vllm.url}/tokenize`, {
      method: 'POST',
      body: JSON.stringify({ messages: history }),
    });
    expect(((await counted.json()) as any).count).toBe(second.body.usage.prompt_tokens);
    // ... and the first request's prompt, a prefix of the second's, is found in the cache.
    expect(second.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(
      first.body.usage.prompt_tokens - 16,
    );
  });

  it('decides by tool_choice: auto calls only on a user message naming a tool, required always, none never', async () => {
    const sim = sims[flavor];
    const calls = async (extra: Record<string, unknown>) => {
      const { status, body } = await chat(sim, { tools: [WEATHER, CLOCK], max_tokens: 40, ...extra });
      expect(status, JSON.stringify(extra)).toBe(200);
      return body.choices[0].message.tool_calls?.map((c: any) => c.function.name) ?? [];
    };
    expect(await calls({ messages: messages('Is it sunny in Paris?') })).toEqual([]);
    expect(await calls({ messages: messages('Use get_weatherly, or get_weather_now.') })).toEqual([]);
    expect(await calls({ messages: messages('Call get_time, then get_weather.') })).toEqual(['get_time']);
    expect(await calls({ messages: messages(), tool_choice: 'none' })).toEqual([]);
    const afterward = [...messages(), { role: 'assistant', content: 'Sure: get_weather.' }];
    expect(await calls({ messages: afterward })).toEqual([]);
    expect(await calls({ messages: messages('Is it sunny?'), tool_choice: 'required' })).toEqual([
      'get_weather',
    ]);
    expect(await calls({ messages: messages('What is get_time?'), tool_choice: 'required' })).toEqual([
      'get_time',
    ]);
    const none = await chat(sim, {
      messages: messages('Is it sunny in Paris?'),
      tools: [WEATHER],
      max_tokens: 5,
    });
    expect(none.body.choices[0].finish_reason).toBe('length');
  });

  it('writes arguments from the parameters schema: required properties, else all, by type', async () => {
    const tool = {
      type: 'function',
      function: {
        name: 'book',
        parameters: {
          type: 'object',
          properties: {
            hotel: { type: 'string', maxLength: 3 },
            nights: { type: 'integer', minimum: 2 },
            budget: { type: 'number' },
            breakfast: { type: 'boolean' },
            guests: { type: 'array', items: { type: 'string' } },
            extras: { type: 'object' },
            room: { enum: ['double', 'single'] },
            note: { type: ['null', 'string'] },
          },
        },
      },
    };
    const argumentsOf = async (tools: unknown[], user: string) => {
      const { body } = await chat(sims[flavor], { messages: messages(user), tools, tool_choice: 'required' });
      return JSON.parse(body.choices[0].message.tool_calls[0].function.arguments);
    };
    expect(await argumentsOf([tool], 'Book me into the Ritz in london.')).toEqual({
      hotel: 'Rit',
      nights: 2,
      budget: 1,
      breakfast: true,
      guests: [],
      extras: {},
      room: 'double',
      note: 'Ritz',
    });
    expect(await argumentsOf([WEATHER], 'what about tokyo? get_weather')).toEqual({
      city: 'tokyo',
      unit: 'celsius',
    });
    expect(await argumentsOf([CLOCK], '?!')).toEqual({});
    const bare = { type: 'function', function: { name: 'ping', parameters: { properties: { to: {} } } } };
    expect(await argumentsOf([bare], '12 34')).toEqual({ to: 'value' });
  });

  it('cuts a call that max_tokens ends early: finish_reason length, the arguments so far', async () => {
    const { body } = await chat(sims[flavor], request({ max_tokens: countTokens('get_weather') + 5 }));
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.choices[0].message.tool_calls[0].function.arguments).toBe(
      tokenize(ARGUMENTS[flavor]).slice(0, 5).join(''),
    );
    expect(body.usage.completion_tokens).toBe(countTokens('get_weather') + 5);
  });

  it('decodes a call in time like text: one token every decodeMsPerToken, counted as generated', async () => {
    const sim = await startLlmSim({ flavor, decodeMsPerToken: 10, prefillMsPerToken: 0 });
    try {
      const started = performance.now();
      const { body } = await chat(sim, request());
      expect(performance.now() - started).toBeGreaterThanOrEqual((callTokens(flavor) - 1) * 10);
      expect(sim.stats().generationTokens).toBe(body.usage.completion_tokens);
    } finally {
      await sim.close();
    }
  });
});

describe('tool calls through the openai client', () => {
  const client = (flavor: FlavorName) =>
    new OpenAI({ baseURL: `${sims[flavor].url}/v1`, apiKey: 'sim', maxRetries: 0 });
  const tools = [WEATHER] as unknown as OpenAI.ChatCompletionTool[];

  it('vLLM: a call, then an answer to its result, non-streaming', async () => {
    const openai = client('vllm');
    const history: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: ASK }];
    const first = await openai.chat.completions.create({ model: 'sim-llama-3-8b', messages: history, tools });
    const call = first.choices[0]?.message.tool_calls?.[0];
    if (call?.type !== 'function') throw new Error('expected a function call');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris', unit: 'celsius' });
    history.push(first.choices[0]?.message as OpenAI.ChatCompletionMessageParam);
    history.push({ role: 'tool', tool_call_id: call.id, content: 'Sunny, 18 °C.' });
    const second = await openai.chat.completions.create({
      model: 'sim-llama-3-8b',
      messages: history,
      tools,
    });
    expect(second.choices[0]?.finish_reason).toBe('stop');
    expect(second.choices[0]?.message.content).toMatch(/\.$/);
  });

  it.each(['vllm', 'llama.cpp'] as const)(
    '%s: the streaming helper assembles the streamed call',
    async (flavor) => {
      const history = messages() as OpenAI.ChatCompletionMessageParam[];
      const stream = client(flavor).chat.completions.stream({
        model: 'sim-llama-3-8b',
        messages: history,
        tools,
        seed: 3,
      });
      const done = await stream.finalChatCompletion();
      expect(done.choices[0]?.finish_reason).toBe('tool_calls');
      const call = done.choices[0]?.message.tool_calls?.[0];
      expect(call).toMatchObject({
        type: 'function',
        function: { name: 'get_weather', arguments: ARGUMENTS[flavor] },
      });
      expect(call?.id).toMatch(CALL_ID[flavor]);
    },
  );
});

describe('a named tool_choice, as each engine takes it', () => {
  const named = { type: 'function', function: { name: 'get_time' } };

  it('vLLM forces the named function by guided decoding: content "", finish_reason stop', async () => {
    const { body } = await chat(sims.vllm, {
      messages: messages(),
      tools: [WEATHER, CLOCK],
      tool_choice: named,
    });
    expect(message(body)).toEqual({
      role: 'assistant',
      content: '',
      tool_calls: [
        {
          id: expect.stringMatching(CALL_ID.vllm),
          type: 'function',
          function: { name: 'get_time', arguments: '{}' },
        },
      ],
    });
    expect(body.choices[0].finish_reason).toBe('stop');
    // The engine writes only the arguments; the first piece rides with the call's name.
    expect(body.usage.completion_tokens).toBe(countTokens('{}'));
    const events = (
      await chat(sims.vllm, { messages: messages(), tools: [CLOCK], tool_choice: named, stream: true })
    ).body;
    expect(events[1].choices[0].delta.tool_calls[0]).toMatchObject({
      function: { name: 'get_time', arguments: '{' },
    });
    expect(events.at(-1).choices[0].finish_reason).toBe('stop');
  });

  it('llama.cpp reads tool_choice as a string: the object falls back to "auto"', async () => {
    const { status, body } = await chat(sims['llama.cpp'], {
      messages: messages(),
      tools: [WEATHER, CLOCK],
      tool_choice: named,
    });
    expect(status).toBe(200);
    expect(body.choices[0].message.tool_calls[0].function.name).toBe('get_weather');
    const unknown = { type: 'function', function: { name: 'nope' } };
    const quiet = await chat(sims['llama.cpp'], {
      messages: messages('Hi'),
      tools: [WEATHER],
      tool_choice: unknown,
      max_tokens: 3,
    });
    expect(quiet.status).toBe(200);
    expect(quiet.body.choices[0].message).toEqual({ role: 'assistant', content: expect.any(String) });
  });
});

describe('requests the engines refuse', () => {
  const vllm = (status: number, message: string | RegExp, param: string) => ({
    error: {
      message: typeof message === 'string' ? message : expect.stringMatching(message),
      type: 'BadRequestError',
      param,
      code: status,
    },
  });
  const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } };

  it("vLLM: a 400 in vLLM's shape naming the parameter", async () => {
    const cases: [Record<string, unknown>, ReturnType<typeof vllm>][] = [
      [
        { tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_time' } } },
        vllm(
          400,
          'The tool specified in `tool_choice` does not match any of the specified `tools`',
          'tool_choice',
        ),
      ],
      [
        { tool_choice: 'required' },
        vllm(400, 'When using `tool_choice`, `tools` must be set.', 'tool_choice'),
      ],
      [
        { tools: [WEATHER], tool_choice: 'sometimes' },
        vllm(
          400,
          'Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are supported.',
          'tool_choice',
        ),
      ],
      [
        { tools: [WEATHER], tool_choice: { type: 'function', function: {} } },
        vllm(400, /^Expected field `name`/, 'tool_choice.function.name'),
      ],
      [{ tools: [{ type: 'function' }] }, vllm(400, /function/, 'tools[0].function')],
      [{ tools: [{ type: 'function', function: { name: 7 } }] }, vllm(400, /name/, 'tools[0].function.name')],
      [{ tools: [{ type: 'retrieval', function: { name: 'x' } }] }, vllm(400, /type/, 'tools[0].type')],
      [{ tools: { get_weather: WEATHER } }, vllm(400, /array/, 'tools')],
      [
        {
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'tool', content: 'sunny' },
          ],
        },
        vllm(400, /tool_call_id/, 'messages[1].tool_call_id'),
      ],
      [
        { messages: [{ role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f' } }] }] },
        vllm(400, /tool_calls\[0\]/, 'messages[0].tool_calls'),
      ],
    ];
    for (const [body, error] of cases) {
      const answer = await chat(sims.vllm, { messages: messages(), ...body });
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body, JSON.stringify(body)).toEqual(error);
    }
    const ok = await chat(sims.vllm, {
      messages: [
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: 'call_1', content: 'x' },
      ],
      tools: [WEATHER],
      max_tokens: 2,
    });
    expect(ok.status).toBe(200);
  });

  it('llama.cpp: a bad tool_choice is a 400; malformed tools and tool_calls throw, which it answers 500', async () => {
    const sim = sims['llama.cpp'];
    const bad = await chat(sim, { messages: messages(), tools: [WEATHER], tool_choice: 'sometimes' });
    expect(bad).toEqual({
      status: 400,
      body: {
        error: { code: 400, message: 'Invalid tool_choice: sometimes', type: 'invalid_request_error' },
      },
    });
    const tools = await chat(sim, { messages: messages(), tools: [{ type: 'function' }] });
    expect(tools.status).toBe(500);
    expect(tools.body).toEqual({
      error: {
        code: 500,
        message:
          'Failed to parse tools: Missing tool function: {"type":"function"}; tools = [\n  {\n    "type": "function"\n  }\n]',
        type: 'server_error',
      },
    });
    const calls = await chat(sim, {
      messages: [{ role: 'assistant', tool_calls: [{ function: { name: 'f' } }] }],
    });
    expect(calls.status).toBe(500);
    expect(calls.body.error.message).toBe(
      'Failed to parse messages: Missing tool call type: {"function":{"name":"f"}}',
    );
    // llama-server does not need tool_call_id.
    const loose = await chat(sim, {
      messages: [
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', content: 'x' },
      ],
      max_tokens: 2,
    });
    expect(loose.status).toBe(200);
  });
});
