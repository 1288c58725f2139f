import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmSim, type LlmSimOptions, startLlmFleet, startLlmSim } from '../../src/sim/llm/server.js';

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

async function metric(sim: LlmSim, name: string): Promise<number> {
  const text = await (await fetch(`${sim.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`no ${name} in\n${text}`);
  return Number(line.slice(name.length + 1));
}

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

  it('answers a chat.completion whose usage follows the documented 4-characters-per-token rule', async () => {
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
          message: { role: 'assistant', content: expect.any(String) },
          logprobs: null,
          finish_reason: 'length',
        },
      ],
      usage: {
        prompt_tokens: Math.ceil(
          '<|system|>You are terse.\n<|user|>Name three\nglazes.\n<|assistant|>'.length / 4,
        ),
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
    expect(rest[6]).toEqual({
      id: role.id,
      object: 'chat.completion.chunk',
      created: role.created,
      model: MODEL,
      choices: [],
      usage: whole.usage,
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

    // contextWindow is 1000 tokens: 4000 characters of prompt are over it.
    const long = await chat(sim, ask('x'.repeat(4000)));
    expect(long.status).toBe(400);
    expect(long.body).toEqual(
      error(
        400,
        /^This model's maximum context length is 1000 tokens\. However, your request has 100\d input tokens/,
      ),
    );
    expect(long.body.error.type).toBe('BadRequestError');
    const greedy = await chat(sim, ask('x'.repeat(2000), { max_tokens: 600 }));
    expect(greedy.status).toBe(400);
    expect(greedy.body).toEqual(error(400, /^'max_tokens' or 'max_completion_tokens' is too large: 600\./));

    const cases: [Record<string, unknown>, string][] = [
      [ask('two please', { n: 2 }), 'n'],
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
      // The system prompt is 2000 of the ~2030 characters: every block of it is shared.
      const hits = afterSecond.prefixHits;
      expect(hits).toBeGreaterThanOrEqual(Math.floor(2000 / 64));
      expect(second.body.usage.prompt_tokens_details.cached_tokens).toBe(hits * 16);
      expect(afterSecond.prefixMisses - afterFirst.prefixMisses).toBe(
        Math.floor(second.body.usage.prompt_tokens / 16) - hits,
      );
      // ~255 ms of prefill at 0.5 ms per token, against ~10 ms for the uncached tail.
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
      for (const line of text.trimEnd().split('\n')) {
        expect(line).toMatch(/^(# (HELP|TYPE) [a-z_]+ .+|[a-z_]+ \d+)$/);
      }
    });
  });

  it('evicts the least recently used blocks when the cache is full', async () => {
    // 222-character prompts: 56 tokens, 3 full blocks of 16 tokens each.
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
      await chat(sim, b); // 3 more blocks: A's first two are the least recently used, and go
      expect(await hitsOfA(sim)).toEqual({ hits: 0, misses: 3 });
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
      const single = (await chat(sim, request(0))).ms; // ~190 ms of decode
      expect(single).toBeGreaterThan(180);

      const running = Promise.all([1, 2, 3, 4].map((i) => chat(sim, request(i))));
      await sleep(60);
      expect(sim.stats()).toMatchObject({ running: 2, waiting: 2 });
      expect(await metric(sim, 'kiln_sim_requests_running')).toBe(2);
      expect(await metric(sim, 'kiln_sim_requests_waiting')).toBe(2);
      const answers = await running;
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);

      const ms = answers.map((a) => a.ms).sort((x, y) => x - y);
      const [first, second, third, fourth] = ms as [number, number, number, number];
      expect(second).toBeLessThan(single * 1.5);
      expect(third).toBeGreaterThan(single * 1.7);
      expect(fourth).toBeGreaterThan(single * 1.7);
      expect(third - second).toBeGreaterThan(single * 0.7);
      expect(first).toBeGreaterThan(single * 0.8);
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
      const total = performance.now() - started;
      expect(events(text).at(-1)).toBe('[DONE]');
      // Ten tokens: the first at the end of prefill, then one every 20 ms, so ~180 ms from first to last.
      expect(arrivals.length).toBeGreaterThanOrEqual(5);
      expect((arrivals.at(-1) as number) - (arrivals[0] as number)).toBeGreaterThan(140);
      expect((arrivals[0] as number) - started).toBeLessThan(total * 0.5);
    });
  });
});

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
    const res = await fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: MODEL, stream: true, ...ask('cut me off', { max_tokens: 20 }) }),
    });
    expect(res.status).toBe(200);
    let text = '';
    let failure: unknown;
    try {
      const decoder = new TextDecoder();
      for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
        text += decoder.decode(bytes, { stream: true });
      }
    } catch (error) {
      failure = error;
    }
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
