import { request } from 'node:http';
import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmSim, type LlmSimOptions, startLlmFleet, startLlmSim } from '../../src/sim/llm/server.js';
import { countTokens, tokenize } from '../../src/sim/llm/text.js';

const MODEL = 'sim-llama-3-8b';

interface Answer {
  status: number;
  body: any;
  ms: number;
}

async function post(sim: LlmSim, path: string, body: unknown, init: RequestInit = {}): Promise<Answer> {
  const started = performance.now();
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text === '' ? undefined : JSON.parse(text),
    ms: performance.now() - started,
  };
}

const chat = (sim: LlmSim, body: Record<string, unknown>, init?: RequestInit) =>
  post(sim, '/v1/chat/completions', { model: MODEL, ...body }, init);

const ask = (content: string, extra: Record<string, unknown> = {}) => ({
  messages: [{ role: 'user', content }],
  ...extra,
});

/** The server-sent events of a stream, `[DONE]` kept as the string. */
function events(text: string): any[] {
  expect(text.endsWith('\n\n')).toBe(true);
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((event) => {
      expect(event.startsWith('data: ')).toBe(true);
      const data = event.slice('data: '.length);
      return data === '[DONE]' ? data : JSON.parse(data);
    });
}

async function streamText(
  sim: LlmSim,
  body: Record<string, unknown>,
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${sim.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, stream: true, ...body }),
  });
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  return { status: res.status, text: await res.text() };
}

/** The value of the series `name` (its labels, if any, ignored). */
async function metric(sim: LlmSim, name: string): Promise<number> {
  const text = await (await fetch(`${sim.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  if (!line) throw new Error(`no ${name} in\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** Waits (polling) until `condition` holds, so that a test sets up an order without guessing times. */
async function until(condition: () => boolean, timeoutMs = 3000): Promise<void> {
  const started = performance.now();
  while (!condition()) {
    if (performance.now() - started > timeoutMs) throw new Error('the condition never held');
    await sleep(2);
  }
}

const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);

/** Whether a plain TCP connect to the port is refused. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', (error: NodeJS.ErrnoException) =>
      error.code === 'ECONNREFUSED' ? resolve(true) : reject(error),
    );
  });
}

describe('LLM simulator: ignoreStreamOptions', () => {
  it('streams the same answer without the usage chunk include_usage asks for; a non-stream answer keeps its usage', async () => {
    await withSim({ decodeMsPerToken: 0, ignoreStreamOptions: true }, async (mute) => {
      const request = ask('Stream it.', { max_tokens: 5, seed: 1 });
      const whole = (await chat(mute, request)).body;
      expect(whole.usage.completion_tokens).toBe(5);
      const stream = events(
        (await streamText(mute, { ...request, stream_options: { include_usage: true } })).text,
      );
      expect(stream.map((e) => (e === '[DONE]' ? e : e.choices.length))).toEqual([
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        '[DONE]',
      ]);
      expect(stream.some((e) => e !== '[DONE]' && e.usage)).toBe(false);
      const text = stream
        .slice(1, 6)
        .map((e) => e.choices[0].delta.content)
        .join('');
      expect(text).toBe(whole.choices[0].message.content);
    });
  });
});

/** Starts a simulator for one test and closes it after, whatever happens. */
async function withSim<T>(options: LlmSimOptions, use: (sim: LlmSim) => Promise<T>): Promise<T> {
  const sim = await startLlmSim(options);
  try {
    return await use(sim);
  } finally {
    await sim.close();
  }
}

describe('LLM simulator: the OpenAI wire protocol', () => {
  let sim: LlmSim;
  beforeAll(async () => {
    sim = await startLlmSim({ decodeMsPerToken: 0.5, maxTokensDefault: 12, contextWindow: 1000 });
  });
  afterAll(async () => sim?.close());

  it('answers a chat.completion whose usage counts tokens by the documented rule', async () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Name three' },
          { type: 'text', text: 'glazes.' },
        ],
      },
    ];
    const { status, body } = await chat(sim, { messages, max_tokens: 7, temperature: 0.2, tools: [] });
    expect(status).toBe(200);
    expect(body).toEqual({
      id: expect.stringMatching(/^chatcmpl-[0-9a-f]{32}$/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: MODEL,
      choices: [
        {
          index: 0,
          // Every field of vLLM's ChatMessage, as its server dumps the pydantic model.
          message: {
            role: 'assistant',
            content: expect.any(String),
            refusal: null,
            annotations: null,
            audio: null,
            function_call: null,
            tool_calls: [],
            reasoning_content: null,
          },
          logprobs: null,
          finish_reason: 'length',
          stop_reason: null,
        },
      ],
      service_tier: null,
      system_fingerprint: null,
      prompt_logprobs: null,
      kv_transfer_params: null,
      usage: {
        // '<|system|>You are terse.\n<|user|>Name three\nglazes.\n<|assistant|>' is < | syst em | >
        // You ␣are ␣ters e . \n < | user | > Name ␣thre e \n glaz es . \n < | assi stan t | >.
        prompt_tokens: 32,
        completion_tokens: 7,
        total_tokens: body.usage.prompt_tokens + 7,
        prompt_tokens_details: { cached_tokens: 0 },
      },
    });
    expect(Math.abs(body.created - Date.now() / 1000)).toBeLessThan(5);
    // One word per output token.
    expect(body.choices[0].message.content.split(' ')).toHaveLength(7);

    const preferred = await chat(sim, ask('x', { max_tokens: 50, max_completion_tokens: 3 }));
    expect(preferred.body.usage.completion_tokens).toBe(3);
    const unset = await chat(sim, ask('no limit given'));
    expect(unset.body.usage.completion_tokens).toBe(12); // maxTokensDefault
    const noModel = await post(sim, '/v1/chat/completions', ask('model left out', { max_tokens: 2 }));
    expect(noModel.body.model).toBe(MODEL);
  });

  it('is deterministic: the same request gets the same text; another seed or prompt gets another', async () => {
    const request = ask('Tell me about kilns.', { max_tokens: 24, seed: 7 });
    const first = await chat(sim, request);
    const second = await chat(sim, request);
    expect(second.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
    expect(second.body.id).not.toBe(first.body.id);
    const reseeded = await chat(sim, { ...request, seed: 8 });
    expect(reseeded.body.choices[0].message.content).not.toBe(first.body.choices[0].message.content);
    const reworded = await chat(sim, ask('Tell me about glazes.', { max_tokens: 24, seed: 7 }));
    expect(reworded.body.choices[0].message.content).not.toBe(first.body.choices[0].message.content);
  });

  it('streams role, one chunk per token, finish, usage and [DONE], the same text as without streaming', async () => {
    const request = ask('Stream it.', { max_tokens: 5, seed: 1 });
    const whole = (await chat(sim, request)).body;
    const { status, text } = await streamText(sim, { ...request, stream_options: { include_usage: true } });
    expect(status).toBe(200);
    const stream = events(text);
    expect(stream).toHaveLength(1 + 5 + 1 + 1 + 1);
    const [role, ...rest] = stream;
    const chunk = (delta: unknown, finish: string | null) => ({
      id: role.id,
      object: 'chat.completion.chunk',
      created: role.created,
      model: MODEL,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    expect(role.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(role).toEqual(chunk({ role: 'assistant', content: '' }, null));
    const contents = rest.slice(0, 5);
    for (const c of contents) expect(c).toEqual(chunk({ content: expect.any(String) }, null));
    expect(contents.map((c) => c.choices[0].delta.content).join('')).toBe(whole.choices[0].message.content);
    expect(rest[5]).toEqual(chunk({}, 'length'));
    // The same usage, except that the prompt's first block (of 17 tokens, 16) is now in the cache.
    expect(whole.usage.prompt_tokens).toBe(17);
    expect(rest[6]).toEqual({
      id: role.id,
      object: 'chat.completion.chunk',
      created: role.created,
      model: MODEL,
      choices: [],
      usage: { ...whole.usage, prompt_tokens_details: { cached_tokens: 16 } },
    });
    expect(rest[7]).toBe('[DONE]');

    const plain = events((await streamText(sim, request)).text);
    expect(plain.map((e) => (e === '[DONE]' ? e : e.choices.length))).toEqual([
      1,
      1,
      1,
      1,
      1,
      1,
      1,
      '[DONE]',
    ]);
    expect(plain.some((e) => e !== '[DONE]' && 'usage' in e)).toBe(false);
  });

  it('ends at a stop string, leaving it out, with finish_reason stop', async () => {
    const request = ask('Stop somewhere.', { max_tokens: 30, seed: 3 });
    const full: string = (await chat(sim, request)).body.choices[0].message.content;
    const stop = ` ${full.split(' ')[10]}`;
    const at = full.indexOf(stop);
    const { body } = await chat(sim, { ...request, stop: [stop, 'never appears'] });
    expect(body.choices[0].message.content).toBe(full.slice(0, at));
    expect(body.choices[0].finish_reason).toBe('stop');
    expect(body.choices[0].stop_reason).toBe(stop); // vLLM names the stop string that matched
    expect(body.usage.completion_tokens).toBe(full.slice(0, at + stop.length).split(' ').length);
  });

  it('lists the model, answers /health with an empty 200, and 404/405 elsewhere like vLLM', async () => {
    const models = await fetch(`${sim.url}/v1/models`);
    expect(await models.json()).toEqual({
      object: 'list',
      data: [
        {
          id: MODEL,
          object: 'model',
          created: expect.any(Number),
          owned_by: 'simulator',
          root: MODEL,
          parent: null,
          max_model_len: 1000,
        },
      ],
    });
    const health = await fetch(`${sim.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.text()).toBe('');
    const missing = await fetch(`${sim.url}/v1/nothing`);
    expect([missing.status, await missing.json()]).toEqual([404, { detail: 'Not Found' }]);
    const wrong = await fetch(`${sim.url}/v1/chat/completions`);
    expect(wrong.status).toBe(405);
  });

  it("refuses what vLLM refuses, in vLLM's error shape", async () => {
    const error = (status: number, message: string | RegExp, param: string | null = null) => ({
      error: {
        message: typeof message === 'string' ? message : expect.stringMatching(message),
        type: expect.any(String),
        param,
        code: status,
      },
    });
    const unknown = await chat(sim, ask('hi', { model: 'gpt-9' }));
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({
      error: { message: 'The model `gpt-9` does not exist.', type: 'NotFoundError', param: null, code: 404 },
    });

    // contextWindow is 1000 tokens: 4000 letters are 1000 tokens, and the template adds 13.
    const long = await chat(sim, ask('x'.repeat(4000)));
    expect(long.status).toBe(400);
    expect(long.body).toEqual(
      error(
        400,
        /^This model's maximum context length is 1000 tokens\. However, your request has 1013 input tokens/,
      ),
    );
    expect(long.body.error.type).toBe('BadRequestError');
    const greedy = await chat(sim, ask('x'.repeat(2000), { max_tokens: 600 }));
    expect(greedy.status).toBe(400);
    expect(greedy.body).toEqual(error(400, /^'max_tokens' or 'max_completion_tokens' is too large: 600\./));

    const cases: [Record<string, unknown>, string][] = [
      [ask('none please', { n: 0 }), 'n'],
      [ask('zero', { max_tokens: 0 }), 'max_tokens'],
      [ask('options', { stream_options: { include_usage: true } }), 'stream_options'],
      [{ messages: [] }, 'messages'],
      [
        { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
        'messages[0].content',
      ],
      [ask('temp', { temperature: 'hot' }), 'temperature'],
    ];
    for (const [body, param] of cases) {
      const answer = await chat(sim, body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body, JSON.stringify(body)).toEqual(error(400, /./, param));
    }
    const notJson = await post(sim, '/v1/chat/completions', '{"messages": [');
    expect(notJson.status).toBe(400);
    expect(notJson.body).toEqual(error(400, /not valid JSON/));
  });
});

describe('LLM simulator: tokens', () => {
  let sim: LlmSim;
  beforeAll(async () => {
    sim = await startLlmSim({ decodeMsPerToken: 0, contextWindow: 1000 });
  });
  afterAll(async () => sim?.close());

  it('tokenizes by the documented rule: the pieces join back into the text, and counting agrees', () => {
    expect(tokenize('Hello there, 2025 kilns!\n\n  日本😀')).toEqual([
      'Hell',
      'o',
      ' ther',
      'e',
      ',',
      ' ',
      '2',
      '0',
      '2',
      '5',
      ' kiln',
      's',
      '!',
      '\n\n  ',
      '日',
      '本',
      '😀',
    ]);
    // The rule as the regular expression the docs give, against random text of every kind.
    const reference = / ?[A-Za-z]{1,4}|[0-9]|[\t-\r ]+|./gsu;
    const alphabet = [
      'a',
      'Q',
      'z',
      ' ',
      ' ',
      '\n',
      '\t',
      '\r',
      '7',
      '.',
      '-',
      'é',
      '日',
      '😀',
      '\ud800',
      '\u00a0',
    ];
    let seed = 42;
    const next = (below: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % below;
    };
    for (let n = 0; n < 500; n++) {
      let text = '';
      for (let i = next(80); i > 0; i--) text += alphabet[next(alphabet.length)];
      const pieces = tokenize(text);
      expect(pieces.join('')).toBe(text);
      expect(pieces).toEqual(text.match(reference) ?? []);
      expect(countTokens(text)).toBe(pieces.length);
    }
  });

  it('counts English prose at 3 to 4.5 characters a token, and digits, punctuation and CJK at one', () => {
    const prose =
      'The kiln was fired slowly through the night, and by morning the glaze had settled into a ' +
      'deep, even blue across every bowl on the upper shelf. Nobody had expected the iron in the ' +
      'clay to come through so strongly, but the potters agreed that it was the best firing of the year.';
    const ratio = prose.length / countTokens(prose);
    expect(ratio).toBeGreaterThan(3);
    expect(ratio).toBeLessThan(4.5);
    expect(countTokens('31415926535897')).toBe(14);
    expect(countTokens('!?;:()[]{}')).toBe(10);
    const japanese = '陶芸の窯は一晩中ゆっくり焼かれた';
    expect(countTokens(japanese)).toBe([...japanese].length);
    expect(countTokens('🔥🏺🔥')).toBe(3); // one token per code point, not per UTF-16 unit
    // Fast enough for benchmarks: a megabyte in well under a second (no quadratic work).
    const started = performance.now();
    expect(countTokens(prose.repeat(4000))).toBe(countTokens(prose) * 4000);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('POST /tokenize counts chat messages exactly as the chat completion reports prompt_tokens', async () => {
    const messages = [
      { role: 'system', content: 'You are the support assistant of Acme. Answer in 3 sentences.' },
      { role: 'user', content: [{ type: 'text', text: 'How hot does a kiln get? 日本語で。' }] },
    ];
    const counted = await post(sim, '/tokenize', { model: MODEL, messages });
    expect(counted.status).toBe(200);
    expect(counted.body).toEqual({
      count: expect.any(Number),
      max_model_len: 1000,
      tokens: expect.any(Array),
    });
    expect(counted.body.tokens).toHaveLength(counted.body.count);
    for (const id of counted.body.tokens) expect(Number.isInteger(id) && id >= 0 && id < 128_000).toBe(true);
    const answered = await chat(sim, { messages, max_tokens: 1 });
    expect(answered.body.usage.prompt_tokens).toBe(counted.body.count);

    // Without the generation prompt, the assistant's opening (`<|assistant|>`: 7 tokens) is left out.
    const open = await post(sim, '/tokenize', { messages, add_generation_prompt: false });
    expect(open.body.tokens).toEqual(counted.body.tokens.slice(0, -7));

    // Raw text, its pieces on request; the same piece always has the same id.
    const hello = await post(sim, '/tokenize', { prompt: 'Hello world', return_token_strs: true });
    expect(hello).toMatchObject({
      status: 200,
      body: { count: 4, max_model_len: 1000, token_strs: ['Hell', 'o', ' worl', 'd'] },
    });
    expect((await post(sim, '/tokenize', { prompt: 'Hello world' })).body).toEqual({
      count: 4,
      max_model_len: 1000,
      tokens: hello.body.tokens,
    });
    const again = await post(sim, '/tokenize', { prompt: 'Hell-o!' });
    expect([again.body.tokens[0], again.body.tokens[2]]).toEqual(hello.body.tokens.slice(0, 2));

    // llama.cpp's shape.
    expect((await post(sim, '/tokenize', { content: 'Hello world' })).body).toEqual({
      tokens: hello.body.tokens,
    });
    const pieces = await post(sim, '/tokenize', { content: 'Hello world', with_pieces: true });
    expect(pieces.body).toEqual({
      tokens: hello.body.tokens.map((id: number, i: number) => ({ id, piece: hello.body.token_strs[i] })),
    });
    // Counting is not queueing: /tokenize leaves the engine alone.
    expect(sim.stats().requests).toBe(1);
  });

  it('POST /tokenize refuses an unknown model as chat does, and bad bodies with a vLLM 400', async () => {
    const unknown = await post(sim, '/tokenize', { model: 'gpt-9', prompt: 'hi' });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual((await chat(sim, ask('hi', { model: 'gpt-9' }))).body);

    const messages = [{ role: 'user', content: 'hi' }];
    const cases: [unknown, string][] = [
      [{}, 'prompt'],
      [{ prompt: 5 }, 'prompt'],
      [{ prompt: 'hi', messages }, 'prompt'],
      [{ messages: [] }, 'messages'],
      [{ messages: [{ content: 'no role' }] }, 'messages'],
      [{ messages, add_generation_prompt: 'yes' }, 'add_generation_prompt'],
      [{ prompt: 'hi', return_token_strs: 1 }, 'return_token_strs'],
      [{ content: ['hi'] }, 'content'],
      [{ model: 3, prompt: 'hi' }, 'model'],
      [['hi'], 'body'],
    ];
    for (const [body, param] of cases) {
      const answer = await post(sim, '/tokenize', body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body, JSON.stringify(body)).toEqual({
        error: { message: expect.any(String), type: 'BadRequestError', param, code: 400 },
      });
    }
    expect((await post(sim, '/tokenize', '{"prompt": ')).status).toBe(400);
    expect((await fetch(`${sim.url}/tokenize`)).status).toBe(405);
  });
});

describe('LLM simulator: the engine model', () => {
  it('caches prompt prefixes: a repeated long system prompt hits the cache, and prefills faster', async () => {
    await withSim({ prefillMsPerToken: 0.5, decodeMsPerToken: 1 }, async (sim) => {
      const system = 'Follow the house style guide for glazes. '.repeat(50).slice(0, 2000);
      const request = (question: string) => ({
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: question },
        ],
        max_tokens: 2,
      });
      const first = await chat(sim, request('First question?'));
      const afterFirst = sim.stats();
      const second = await chat(sim, request('Second question?'));
      const afterSecond = sim.stats();

      expect(first.body.usage.prompt_tokens).toBeGreaterThan(500);
      expect(afterFirst).toMatchObject({ requests: 1, prefixHits: 0, running: 0, waiting: 0 });
      expect(afterFirst.prefixMisses).toBe(Math.floor(first.body.usage.prompt_tokens / 16));
      // `<|system|>` and the system prompt are 640 of the 659 tokens: their 40 blocks are shared.
      const hits = afterSecond.prefixHits;
      expect(hits).toBe(40);
      expect(second.body.usage.prompt_tokens_details.cached_tokens).toBe(hits * 16);
      expect(afterSecond.prefixMisses - afterFirst.prefixMisses).toBe(
        Math.floor(second.body.usage.prompt_tokens / 16) - hits,
      );
      // ~330 ms of prefill at 0.5 ms per token, against ~10 ms for the uncached tail.
      expect(first.ms).toBeGreaterThan(240);
      expect(second.ms).toBeLessThan(first.ms - 150);

      expect(await metric(sim, 'kiln_sim_prefix_cache_hits_total')).toBe(hits);
      expect(await metric(sim, 'kiln_sim_prefix_cache_misses_total')).toBe(afterSecond.prefixMisses);
      expect(await metric(sim, 'kiln_sim_requests_total')).toBe(2);
      expect(await metric(sim, 'kiln_sim_prompt_tokens_total')).toBe(
        first.body.usage.prompt_tokens + second.body.usage.prompt_tokens,
      );
      expect(await metric(sim, 'kiln_sim_generation_tokens_total')).toBe(4);
      expect(afterSecond).toMatchObject({
        requests: 2,
        promptTokens: afterSecond.promptTokens,
        generationTokens: 4,
      });
    });
  });

  it('serves /metrics in the Prometheus text format with HELP and TYPE for every series', async () => {
    await withSim({}, async (sim) => {
      const res = await fetch(`${sim.url}/metrics`);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await res.text();
      const types: Record<string, string> = {
        kiln_sim_prefix_cache_hits_total: 'counter',
        kiln_sim_prefix_cache_misses_total: 'counter',
        kiln_sim_requests_running: 'gauge',
        kiln_sim_requests_waiting: 'gauge',
        kiln_sim_requests_total: 'counter',
        kiln_sim_prompt_tokens_total: 'counter',
        kiln_sim_generation_tokens_total: 'counter',
      };
      for (const [name, type] of Object.entries(types)) {
        expect(text).toMatch(new RegExp(`^# HELP ${name} \\S.*$`, 'm'));
        expect(text).toMatch(new RegExp(`^# TYPE ${name} ${type}$`, 'm'));
        expect(text).toMatch(new RegExp(`^${name} 0$`, 'm'));
      }
      expect(text).toMatch(/^# HELP kiln_sim_prefix_cache_hits_total .*in blocks/m);
      // vLLM's names beside them, each labelled with the served model.
      const vllm: Record<string, [string, string]> = {
        'vllm:num_requests_running': ['gauge', '0'],
        'vllm:num_requests_waiting': ['gauge', '0'],
        'vllm:gpu_cache_usage_perc': ['gauge', '0'],
        'vllm:prefix_cache_queries_total': ['counter', '0'],
        'vllm:prefix_cache_hits_total': ['counter', '0'],
      };
      for (const [name, [type, value]] of Object.entries(vllm)) {
        expect(text).toMatch(new RegExp(`^# HELP ${name} \\S.*$`, 'm'));
        expect(text).toMatch(new RegExp(`^# TYPE ${name} ${type}$`, 'm'));
        expect(text.split('\n')).toContain(`${name}{model_name="${MODEL}"} ${value}`);
      }
      expect(text).toMatch(/^# TYPE vllm:cache_config_info gauge$/m);
      expect(text.split('\n')).toContain(
        `vllm:cache_config_info{block_size="16",num_gpu_blocks="1024",model_name="${MODEL}"} 1`,
      );
      for (const line of text.trimEnd().split('\n')) {
        expect(line).toMatch(
          /^(# (HELP|TYPE) [a-z_:]+ .+|[a-z_:]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [\d.e+-]+)$/,
        );
      }
    });
  });

  it('empties the prefix cache on POST /reset_prefix_cache, and on resetPrefixCache() in process', async () => {
    await withSim({ decodeMsPerToken: 0 }, async (sim) => {
      const request = ask('Glaze the bowls evenly. '.repeat(40), { max_tokens: 1 });
      const cached = async () => (await chat(sim, request)).body.usage.prompt_tokens_details.cached_tokens;
      expect(await cached()).toBe(0);
      expect(await cached()).toBeGreaterThan(0);
      const reset = await post(sim, '/reset_prefix_cache', '');
      expect([reset.status, reset.body]).toEqual([200, undefined]);
      expect(await metric(sim, 'kiln_sim_prefix_cache_blocks')).toBe(0);
      expect(await cached()).toBe(0);
      expect(await cached()).toBeGreaterThan(0);
      sim.resetPrefixCache();
      expect(sim.stats().cachedBlocks).toBe(0);
      expect(await cached()).toBe(0);
      expect((await fetch(`${sim.url}/reset_prefix_cache`)).status).toBe(405);
    });
  });

  it("counts vLLM's prefix-cache queries and hits in tokens: the sums of prompt_tokens and cached_tokens", async () => {
    await withSim({ decodeMsPerToken: 0, kvBlocks: 64 }, async (sim) => {
      const system = {
        role: 'system',
        content: 'Answer as the glaze chemist of a small pottery. '.repeat(20),
      };
      const question = (content: string) => ({
        messages: [system, { role: 'user', content }],
        max_tokens: 2,
      });
      const usages = [];
      for (const content of ['Why did it crawl?', 'Why did it craze?', 'Is it food safe?']) {
        usages.push((await chat(sim, question(content))).body.usage);
      }
      usages.push((await chat(sim, ask('Something else entirely.', { max_tokens: 2 }))).body.usage);
      const streamed = await streamText(sim, {
        ...question('And streamed?'),
        stream_options: { include_usage: true },
      });
      usages.push(events(streamed.text).at(-2).usage);

      const cached = usages.map((u) => u.prompt_tokens_details.cached_tokens as number);
      // The system prompt's blocks, computed by the first request, supply the 2nd, 3rd and the stream.
      expect(cached.map((c) => c > 0)).toEqual([false, true, true, false, true]);
      expect(await metric(sim, 'vllm:prefix_cache_hits_total')).toBe(sum(cached));
      expect(await metric(sim, 'vllm:prefix_cache_queries_total')).toBe(
        sum(usages.map((u) => u.prompt_tokens)),
      );
      expect(sim.stats().prefixHitTokens).toBe(sum(cached));
      const blocks = await metric(sim, 'kiln_sim_prefix_cache_blocks');
      expect(blocks).toBeGreaterThan(16);
      expect(await metric(sim, 'vllm:gpu_cache_usage_perc')).toBeCloseTo(blocks / 64, 10);
    });
  });

  // 2400 letters are 600 tokens; with the template, 613 tokens to prefill.
  const long = (letter: string) => ask(letter.repeat(2400), { max_tokens: 1 });

  it('prefills one request at a time: two long uncached prompts together take twice as long as one', async () => {
    await withSim({ prefillMsPerToken: 1, decodeMsPerToken: 0 }, async (sim) => {
      const prefill = 613;
      const single = await chat(sim, long('a'));
      expect(single.body.usage).toMatchObject({
        prompt_tokens: 613,
        prompt_tokens_details: { cached_tokens: 0 },
      });
      expect(single.ms).toBeGreaterThan(prefill * 0.95);

      const pair = await Promise.all([chat(sim, long('b')), chat(sim, long('c'))]);
      for (const answer of pair) expect(answer.body.usage.prompt_tokens_details.cached_tokens).toBe(0);
      const [faster, slower] = pair.map((answer) => answer.ms).sort((x, y) => x - y) as [number, number];
      // Side by side both would end after one prefill; in one lane the second waits for the first.
      expect(slower).toBeGreaterThan(prefill * 2 * 0.95);
      expect(faster).toBeLessThan(slower * 0.75);
    });
  });

  it('matches the prefix cache when a prefill starts: a request queued behind one with the same prefix reuses its blocks', async () => {
    await withSim({ prefillMsPerToken: 1, decodeMsPerToken: 0 }, async (sim) => {
      const system = { role: 'system', content: 'glaze '.repeat(300) };
      const request = (content: string) => ({ messages: [system, { role: 'user', content }], max_tokens: 1 });
      const pair = await Promise.all([chat(sim, request('First?')), chat(sim, request('Second?'))]);
      const cached = (answer: Answer): number => answer.body.usage.prompt_tokens_details.cached_tokens;
      // Whichever took the lane first computed the shared blocks; the other found them.
      const [first, second] = pair.sort((x, y) => cached(x) - cached(y)) as [Answer, Answer];
      const prefill = first.body.usage.prompt_tokens; // ms, at 1 ms a token
      expect(cached(first)).toBe(0);
      expect(cached(second)).toBeGreaterThan(prefill - 32);
      expect(first.ms).toBeGreaterThan(prefill * 0.95);
      // The second prefills only its uncached tail after the first: far less than two whole prefills.
      expect(second.ms).toBeLessThan(prefill * 1.5);
    });
  });

  it('a stream that gives up while queued for the prefill lane leaves without using its time', async () => {
    await withSim({ prefillMsPerToken: 1, decodeMsPerToken: 0 }, async (sim) => {
      const prefill = 613;
      const started = performance.now();
      const endOf = (answer: Promise<Answer>) => answer.then(() => performance.now() - started);
      const first = endOf(chat(sim, long('a')));
      await until(() => sim.stats().running === 1);
      // A stream: engines notice a stream's client leaving (not a non-streaming one's, see below).
      const quitter = new AbortController();
      const second = fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: MODEL, stream: true, ...long('b') }),
        signal: quitter.signal,
      }).then((res) => res.text());
      await until(() => sim.stats().prefillWaiting === 1);
      const third = endOf(chat(sim, long('c')));
      await until(() => sim.stats().prefillWaiting === 2);
      quitter.abort();
      await expect(second).rejects.toMatchObject({ name: 'AbortError' });
      const [a, c] = await Promise.all([first, third]);
      // The third prefills after the first, and ends about two prefills after the first began:
      // not three, as it would if the second had kept its place.
      expect(c).toBeGreaterThan(prefill * 2 * 0.95);
      expect(c).toBeGreaterThan(a);
      expect(c).toBeLessThan(prefill * 2.5);
      expect(sim.stats()).toMatchObject({ running: 0, prefillWaiting: 0 });
    });
  });

  it('evicts the least recently used blocks when the cache is full', async () => {
    // 63-token prompts (200 letters are 50 tokens, the template 13): 3 full blocks of 16 tokens.
    const a = ask('a'.repeat(200), { max_tokens: 1 });
    const b = ask('b'.repeat(200), { max_tokens: 1 });
    const hitsOfA = async (sim: LlmSim) => {
      const before = sim.stats();
      await chat(sim, a);
      const after = sim.stats();
      return { hits: after.prefixHits - before.prefixHits, misses: after.prefixMisses - before.prefixMisses };
    };
    await withSim({ kvBlocks: 4, decodeMsPerToken: 0 }, async (sim) => {
      expect(await hitsOfA(sim)).toEqual({ hits: 0, misses: 3 });
      expect(await hitsOfA(sim)).toEqual({ hits: 3, misses: 0 }); // fits in 4 blocks
      // 3 more blocks: two of A's must go, and as in vLLM (a finished sequence's blocks are freed
      // tail first) its last two go while its first, the shared head, stays.
      await chat(sim, b);
      expect(await hitsOfA(sim)).toEqual({ hits: 1, misses: 2 });
      expect(await metric(sim, 'kiln_sim_prefix_cache_blocks')).toBe(4);
    });
    await withSim({ kvBlocks: 1024, decodeMsPerToken: 0 }, async (sim) => {
      await chat(sim, a);
      await chat(sim, b);
      expect(await hitsOfA(sim)).toEqual({ hits: 3, misses: 0 });
    });
  });

  it('batches at most maxSequences requests; the others queue and finish about one latency later', async () => {
    await withSim({ maxSequences: 2, decodeMsPerToken: 10 }, async (sim) => {
      const request = (i: number) => ask(`request ${i}`, { max_tokens: 20 });
      const decode = 190; // 19 tokens after the first, 10 ms each
      const single = (await chat(sim, request(0))).ms;
      expect(single).toBeGreaterThan(decode * 0.95);

      const running = Promise.all([1, 2, 3, 4].map((i) => chat(sim, request(i))));
      await until(() => sim.stats().requests === 5);
      expect(sim.stats()).toMatchObject({ running: 2, waiting: 2 });
      expect(await metric(sim, 'kiln_sim_requests_running')).toBe(2);
      expect(await metric(sim, 'kiln_sim_requests_waiting')).toBe(2);
      expect(await metric(sim, 'vllm:num_requests_running')).toBe(2);
      expect(await metric(sim, 'vllm:num_requests_waiting')).toBe(2);
      const answers = await running;
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);

      const ms = answers.map((a) => a.ms).sort((x, y) => x - y);
      const [first, second, third, fourth] = ms as [number, number, number, number];
      expect(second).toBeLessThan(single * 1.5);
      expect(third).toBeGreaterThan(decode * 2 * 0.95);
      expect(fourth).toBeGreaterThan(decode * 2 * 0.95);
      expect(third - second).toBeGreaterThan(decode * 0.7);
      expect(first).toBeGreaterThan(decode * 0.95);
      expect(sim.stats()).toMatchObject({ requests: 5, running: 0, waiting: 0, generationTokens: 100 });
    });
  });

  it('flushes each token as it is decoded, one every decodeMsPerToken', async () => {
    await withSim({ decodeMsPerToken: 20 }, async (sim) => {
      const started = performance.now();
      const res = await fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: MODEL, stream: true, ...ask('slowly', { max_tokens: 10 }) }),
      });
      const arrivals: number[] = [];
      let text = '';
      const decoder = new TextDecoder();
      for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
        const piece = decoder.decode(bytes, { stream: true });
        if (piece.includes('"content":"') && !piece.includes('"content":""'))
          arrivals.push(performance.now());
        text += piece;
      }
      expect(events(text).at(-1)).toBe('[DONE]');
      // Ten tokens: the first at the end of prefill, then one every 20 ms, so ~180 ms from first to
      // last (less when a busy machine runs late on the first: the schedule does not slip).
      expect(arrivals.length).toBeGreaterThanOrEqual(5);
      expect((arrivals.at(-1) as number) - (arrivals[0] as number)).toBeGreaterThan(100);
      expect((arrivals.at(-1) as number) - started).toBeGreaterThan(175);
    });
  });
});

describe('LLM simulator: clients that go away', () => {
  // 200 tokens at 5 ms: about 1 s of decode, long enough to leave in the middle of.
  const long = ask('Tell me a long story.', { max_tokens: 200 });
  const leaveMidGeneration = async (sim: LlmSim, body: Record<string, unknown>) => {
    const leaving = new AbortController();
    const answer = fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: MODEL, ...body }),
      signal: leaving.signal,
    }).then((res) => res.text());
    answer.catch(() => undefined);
    await until(() => sim.stats().generationTokens >= 5);
    leaving.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
    return sim.stats().generationTokens;
  };

  it('a non-streaming request whose client leaves runs to its end, as llama.cpp did in the recording', async () => {
    await withSim({ decodeMsPerToken: 5 }, async (sim) => {
      const atLeaving = await leaveMidGeneration(sim, long);
      expect(atLeaving).toBeLessThan(200);
      // The engine never noticed: it decodes every token, then frees the slot.
      await until(() => sim.stats().generationTokens === 200, 5000);
      await until(() => sim.stats().running === 0);
      expect(await metric(sim, 'kiln_sim_generation_tokens_total')).toBe(200);
    });
  });

  it("with nonStreamDisconnect 'cancel' (vLLM's server) it stops as the client leaves", async () => {
    await withSim({ decodeMsPerToken: 5, nonStreamDisconnect: 'cancel' }, async (sim) => {
      await leaveMidGeneration(sim, long);
      await until(() => sim.stats().running === 0, 1000);
      const stopped = sim.stats().generationTokens;
      await sleep(100);
      expect(sim.stats().generationTokens).toBe(stopped);
      expect(stopped).toBeLessThan(200);
    });
  });

  it('a stream whose client leaves stops at once, whatever the setting', async () => {
    await withSim({ decodeMsPerToken: 5 }, async (sim) => {
      await leaveMidGeneration(sim, { ...long, stream: true });
      await until(() => sim.stats().running === 0, 1000);
      const stopped = sim.stats().generationTokens;
      await sleep(100);
      expect(sim.stats().generationTokens).toBe(stopped);
      expect(stopped).toBeLessThan(200);
    });
  });
});

describe('LLM simulator: n choices', () => {
  let sim: LlmSim;
  beforeAll(async () => {
    sim = await startLlmSim({ decodeMsPerToken: 0.5 });
  });
  afterAll(async () => sim?.close());

  const request = ask('Three ways to glaze a bowl.', { max_tokens: 8, seed: 5 });

  it('answers n choices, index by index, each its own text; the first is the n = 1 answer', async () => {
    const single = (await chat(sim, request)).body;
    const before = sim.stats().generationTokens;
    const { status, body } = await chat(sim, { ...request, n: 3 });
    expect(status).toBe(200);
    expect(body.choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
    const texts = body.choices.map((c: any) => c.message.content);
    expect(new Set(texts).size).toBe(3);
    expect(texts[0]).toBe(single.choices[0].message.content);
    for (const c of body.choices)
      expect(c).toMatchObject({ finish_reason: 'length', message: { refusal: null } });
    // vLLM counts every choice's tokens; the prompt is counted (and prefilled) once.
    expect(body.usage).toMatchObject({ prompt_tokens: single.usage.prompt_tokens, completion_tokens: 24 });
    expect(body.usage.total_tokens).toBe(single.usage.prompt_tokens + 24);
    expect(sim.stats().generationTokens - before).toBe(24);
    expect((await chat(sim, { ...request, n: 3 })).body.choices.map((c: any) => c.message.content)).toEqual(
      texts,
    );
  });

  it('streams every choice: roles first, chunks per index, a finish per choice, one usage for all', async () => {
    const whole = (await chat(sim, { ...request, n: 2 })).body;
    const { text } = await streamText(sim, { ...request, n: 2, stream_options: { include_usage: true } });
    const stream = events(text);
    expect(stream.at(-1)).toBe('[DONE]');
    const chunks = stream.slice(0, -1);
    expect(chunks.slice(0, 2).map((c) => [c.choices[0].index, c.choices[0].delta])).toEqual([
      [0, { role: 'assistant', content: '' }],
      [1, { role: 'assistant', content: '' }],
    ]);
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0]?.index === index);
      const content = mine.map((c) => c.choices[0].delta.content ?? '').join('');
      expect(content).toBe(whole.choices[index].message.content);
      expect(mine.filter((c) => c.choices[0].finish_reason !== null).map((c) => c.choices[0])).toEqual([
        { index, delta: {}, logprobs: null, finish_reason: 'length' },
      ]);
    }
    // Each choice's tokens interleave, position by position.
    expect(chunks.slice(2, 4).map((c) => c.choices[0].index)).toEqual([0, 1]);
    const usage = chunks.filter((c) => c.usage);
    expect(usage).toHaveLength(1);
    expect(usage[0].choices).toEqual([]);
    expect(usage[0].usage.completion_tokens).toBe(16);
    expect(chunks.at(-1)).toBe(usage[0]);
  });

  it('ends each choice at its own stop string', async () => {
    const texts: string[] = (await chat(sim, { ...request, n: 2, max_tokens: 30 })).body.choices.map(
      (c: any) => c.message.content,
    );
    const stop = ` ${(texts[1] as string).split(' ')[3]}`;
    const { body } = await chat(sim, { ...request, n: 2, max_tokens: 30, stop });
    const cut = texts.map((t) => (t.includes(stop) ? t.slice(0, t.indexOf(stop)) : t));
    expect(body.choices.map((c: any) => c.message.content)).toEqual(cut);
    expect(body.choices[1].finish_reason).toBe('stop');
  });
});

/**
 * A streamed request the drop-mid-stream fault cuts off: what arrived, and how it ended. node:http
 * rather than fetch: a fetch body that errors discards the chunks not yet read, which on a busy
 * machine can be the events that did arrive.
 */
function cutStream(sim: LlmSim, prompt: string): Promise<{ status: number; text: string; failure: unknown }> {
  return new Promise((resolve) => {
    const req = request(`${sim.url}/v1/chat/completions`, { method: 'POST' }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (piece: string) => {
        text += piece;
      });
      res.on('error', (error) => resolve({ status: res.statusCode ?? 0, text, failure: error }));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, failure: undefined }));
    });
    req.end(JSON.stringify({ model: MODEL, stream: true, ...ask(prompt, { max_tokens: 20 }) }));
  });
}

describe('LLM simulator: faults', () => {
  let sim: LlmSim;
  beforeAll(async () => {
    sim = await startLlmSim({ decodeMsPerToken: 2 });
  });
  afterAll(async () => sim?.close());

  it('hang: the request is accepted and never answered, until the fault is cleared', async () => {
    await sim.setFault({ kind: 'hang' });
    const started = performance.now();
    const hung = chat(sim, ask('anyone there?'), { signal: AbortSignal.timeout(300) });
    await expect(hung).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(performance.now() - started).toBeGreaterThan(280);
    expect((await fetch(`${sim.url}/health`)).status).toBe(200); // the HTTP front still answers
    await sim.setFault(undefined);
    expect((await chat(sim, ask('now?', { max_tokens: 2 }))).status).toBe(200);
  });

  it('hang: close() still ends promptly, cutting the hung request', async () => {
    const own = await startLlmSim();
    await own.setFault({ kind: 'hang' });
    const hung = chat(own, ask('waiting'));
    await sleep(50);
    const started = performance.now();
    await own.close();
    expect(performance.now() - started).toBeLessThan(1000);
    await expect(hung).rejects.toThrow();
  });

  it('drop-mid-stream: the stream ends abruptly after N events, without [DONE]', async () => {
    await sim.setFault({ kind: 'drop-mid-stream', afterChunks: 3 });
    const { status, text, failure } = await cutStream(sim, 'cut me off');
    expect(status).toBe(200);
    expect(failure).toBeInstanceOf(Error);
    const received = events(text);
    expect(received).toHaveLength(3);
    expect(received[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(received).not.toContain('[DONE]');

    // Without streaming the connection is cut before any answer.
    await expect(chat(sim, ask('whole answer please', { max_tokens: 3 }))).rejects.toThrow();
    await sim.setFault(undefined);
    expect((await chat(sim, ask('again', { max_tokens: 3 }))).status).toBe(200);
  });

  it('drop-mid-stream: every allowed event is out before the cut, however late the decode runs', async () => {
    // A decode behind its schedule writes several steps in one tick; the cut must not destroy the
    // connection while the earlier ones are still corked.
    for (const decodeMsPerToken of [0.05, 0.2]) {
      const own = await startLlmSim({ decodeMsPerToken });
      try {
        for (const afterChunks of [3, 8, 16]) {
          await own.setFault({ kind: 'drop-mid-stream', afterChunks });
          for (let i = 0; i < 15; i++) {
            const { text } = await cutStream(own, `late decode ${afterChunks} ${i}`);
            expect(events(text), `${decodeMsPerToken} ms a token, ${afterChunks} events`).toHaveLength(
              afterChunks,
            );
          }
        }
      } finally {
        await own.close();
      }
    }
  });

  it("error: chat completions answer the status in vLLM's shape; set and cleared over HTTP too", async () => {
    await sim.setFault({ kind: 'error', status: 503, message: 'engine overloaded' });
    const overloaded = await chat(sim, ask('hello'));
    expect(overloaded.status).toBe(503);
    expect(overloaded.body).toEqual({
      error: { message: 'engine overloaded', type: 'ServiceUnavailableError', param: null, code: 503 },
    });

    const set = await post(sim, '/sim/fault', { kind: 'error', status: 500 });
    expect(set).toMatchObject({ status: 200, body: { fault: { kind: 'error', status: 500 } } });
    expect(((await (await fetch(`${sim.url}/sim/fault`)).json()) as any).fault).toEqual({
      kind: 'error',
      status: 500,
    });
    const failed = await chat(sim, ask('hello'));
    expect(failed.status).toBe(500);
    expect(failed.body.error).toMatchObject({ type: 'InternalServerError', code: 500, param: null });
    expect(failed.body.error.message).toEqual(expect.any(String));

    const bad = await post(sim, '/sim/fault', { kind: 'error', status: 200 });
    expect(bad.status).toBe(400);
    expect((await post(sim, '/sim/fault', { kind: 'melt' })).status).toBe(400);

    expect(await post(sim, '/sim/fault', {})).toMatchObject({ status: 200, body: { fault: null } });
    expect((await chat(sim, ask('hello', { max_tokens: 2 }))).status).toBe(200);
  });

  it('refuse: connects are refused until the fault is cleared, then the same port answers again', async () => {
    await sim.setFault({ kind: 'refuse' });
    expect(await refused(sim.port)).toBe(true);
    await expect(fetch(`${sim.url}/health`)).rejects.toMatchObject({ cause: { code: 'ECONNREFUSED' } });
    await sim.setFault(undefined);
    expect(await refused(sim.port)).toBe(false);
    expect((await chat(sim, ask('back?', { max_tokens: 2 }))).status).toBe(200);

    // Over HTTP, with durationMs: the only way back for a simulator nobody holds in process.
    const started = performance.now();
    expect((await post(sim, '/sim/fault', { kind: 'refuse', durationMs: 400 })).status).toBe(200);
    await sleep(20);
    expect(await refused(sim.port)).toBe(true);
    while (await refused(sim.port)) {
      expect(performance.now() - started).toBeLessThan(3000);
      await sleep(25);
    }
    expect(performance.now() - started).toBeGreaterThan(380);
    expect((await fetch(`${sim.url}/health`)).status).toBe(200);
  });
});

describe('LLM simulator: fleets', () => {
  it('starts N replicas on any free ports, each its own server', async () => {
    const fleet = await startLlmFleet(3);
    try {
      expect(new Set(fleet.map((s) => s.port)).size).toBe(3);
      await chat(fleet[0] as LlmSim, ask('only the first', { max_tokens: 1 }));
      expect(fleet.map((s) => s.stats().requests)).toEqual([1, 0, 0]);
      for (const s of fleet) expect((await fetch(`${s.url}/health`)).status).toBe(200);
    } finally {
      await Promise.all(fleet.map((s) => s.close()));
    }
  });

  it('starts replicas on consecutive ports from a given one', async () => {
    for (let attempt = 0; ; attempt++) {
      const probe = createServer();
      const port = await new Promise<number>((resolve) =>
        probe.listen(0, '127.0.0.1', () => resolve((probe.address() as { port: number }).port)),
      );
      await new Promise((resolve) => probe.close(resolve));
      let fleet: LlmSim[];
      try {
        fleet = await startLlmFleet(2, { port });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE' && attempt < 5) continue;
        throw error;
      }
      try {
        expect(fleet.map((s) => s.port)).toEqual([port, port + 1]);
        expect(fleet.map((s) => s.url)).toEqual([`http://127.0.0.1:${port}`, `http://127.0.0.1:${port + 1}`]);
      } finally {
        await Promise.all(fleet.map((s) => s.close()));
      }
      return;
    }
  });
});
