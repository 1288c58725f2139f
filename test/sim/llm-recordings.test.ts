import { readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmSim, type LlmSimOptions, startLlmSim } from '../../src/sim/llm/server.js';
import { REPO_ROOT } from '../helpers/process.js';
import { shape } from '../helpers/shape.js';

/**
 * The LLM simulator's llama.cpp flavor held against captures of a real llama-server, build b11669
 * (../shared/reference/recordings/llamacpp, see its README): every recorded request is sent to the
 * simulator, and the answer must have the recorded status, content type and structure — keys and
 * value types, recursively — and, for streams, the recorded sequence of events. Ids, times, text
 * and counts are the simulator's own. Where an exchange cannot be compared whole, the test compares
 * what it can and says why.
 */

const dir = path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'llamacpp');
const recording = (name: string) => JSON.parse(readFileSync(path.join(dir, name), 'utf8'));

interface Exchange {
  request: { method: string; path: string; headers?: Record<string, string>; body?: unknown };
  response: {
    status: number;
    headers: Record<string, string>;
    body?: unknown;
    sse_events?: string[];
  };
}

/** The recordings shorten long texts to a description of them; this writes them out again. */
function expand(text: string): string {
  const repeated = /^<'(.*)' repeated (\d+) times = \d+ chars>$/s.exec(text);
  if (repeated) return (repeated[1] as string).repeat(Number(repeated[2]));
  const system = /^<system prompt: '(.*)' \+ '(.*)' x(\d+) \(\d+ chars\)>$/s.exec(text);
  if (system) return (system[1] as string) + (system[2] as string).repeat(Number(system[3]));
  return text;
}

function expandBody(body: unknown): unknown {
  if (typeof body === 'string') return expand(body);
  if (Array.isArray(body)) return body.map(expandBody);
  if (body !== null && typeof body === 'object') {
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [k, expandBody(v)]));
  }
  return body;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** Sends a recorded request (the body as recorded: JSON, or the verbatim text when it is not JSON). */
async function send(sim: LlmSim, request: Exchange['request']): Promise<Answer> {
  const raw = typeof request.body === 'string' && request.body.startsWith('{');
  const body =
    request.body === undefined ? undefined : raw ? request.body : JSON.stringify(expandBody(request.body));
  const res = await fetch(`${sim.url}${request.path}`, {
    method: request.method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: body as string }),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** The recorded headers a client reads: content type, and llama-server's own. */
function expectHeaders(answer: Answer, recorded: Record<string, string>) {
  for (const name of ['content-type', 'server', 'x-accel-buffering']) {
    if (recorded[name] !== undefined) expect(answer.headers.get(name), name).toBe(recorded[name]);
  }
}

/** Status, headers and structure of a JSON answer against the recorded one. */
function expectSameJson(answer: Answer, recorded: Exchange['response']): any {
  expect(answer.status).toBe(recorded.status);
  expectHeaders(answer, recorded.headers);
  const body = JSON.parse(answer.text);
  expect(shape(body)).toEqual(shape(recorded.body));
  return body;
}

/** The `data:` payloads of a stream, `[DONE]` kept as the string. */
function payloads(events: string[]): any[] {
  return events.map((event) => {
    expect(event.startsWith('data: ')).toBe(true);
    const data = event.slice('data: '.length).trimEnd();
    return data === '[DONE]' ? data : JSON.parse(data);
  });
}

const streamEvents = (text: string) => {
  expect(text.endsWith('\n\n')).toBe(true);
  return text.slice(0, -2).split('\n\n');
};

/** What a client acts on in each event of a stream. */
function kind(event: any): string {
  if (event === '[DONE]') return 'done';
  if (event.choices.length === 0) return event.usage ? 'usage' : 'empty';
  const choice = event.choices[0];
  if (choice.finish_reason !== null) return 'finish';
  if (choice.delta.role !== undefined) return 'role';
  return 'content';
}

/** The sequence of event kinds, a run of content chunks as one. */
const sequence = (events: any[]) =>
  events.map(kind).filter((k, i, all) => !(k === 'content' && all[i - 1] === 'content'));

/** The structure of the first event of each kind. */
const shapesByKind = (events: any[]) =>
  Object.fromEntries(
    events
      .filter((e, i) => events.findIndex((f) => kind(f) === kind(e)) === i)
      .map((e) => [kind(e), shape(e)]),
  );

const LLAMA: LlmSimOptions = {
  flavor: 'llama.cpp',
  // As the recorded server: `--alias tiny -c 8192 -np 2`, so 2 slots of 4096 tokens.
  model: 'tiny',
  contextWindow: 4096,
  maxSequences: 2,
  prefillMsPerToken: 0.001,
  decodeMsPerToken: 0.2,
};

describe('the llama.cpp flavor against recordings of llama-server b11669', () => {
  let sim: LlmSim;
  beforeAll(async () => {
    sim = await startLlmSim(LLAMA);
  });
  afterAll(async () => sim?.close());

  it.each(['chat-sync.json', 'chat-n2.json', 'chat-json-schema.json', 'chat-tools.json'])(
    '%s: the same status, headers and body structure',
    async (file) => {
      const exchange: Exchange = recording(file);
      const body = expectSameJson(await send(sim, exchange.request), exchange.response);
      const recorded = exchange.response.body as any;
      expect(body.choices.map((c: any) => c.index)).toEqual(recorded.choices.map((c: any) => c.index));
      expect(body.system_fingerprint).toMatch(/^b11669-/);
      // usage and timings tell the same story, as in every recorded answer.
      for (const answer of [recorded, body]) {
        expect(answer.usage.prompt_tokens_details.cached_tokens).toBe(answer.timings.cache_n);
        expect(answer.timings.cache_n + answer.timings.prompt_n).toBe(answer.usage.prompt_tokens);
        expect(answer.timings.predicted_n).toBe(answer.usage.completion_tokens);
      }
      // Not compared: the text, and the tools (llama-server renders them into the prompt; the
      // simulator does not). chat-tools asks "auto" and its message does not name get_weather, so
      // neither called the tool.
    },
  );

  it('chat-json-schema.json: JSON held to the schema, ending stop, as the grammar made it', async () => {
    const exchange: Exchange = recording('chat-json-schema.json');
    const recorded = (exchange.response.body as any).choices[0];
    const schema = (exchange.request.body as any).response_format.json_schema.schema;
    const check = (content: string) => {
      const value = JSON.parse(content);
      expect(Object.keys(value).sort()).toEqual(Object.keys(schema.properties).sort());
      expect(typeof value.name).toBe('string');
      expect(value.name.length).toBeLessThanOrEqual(schema.properties.name.maxLength);
      expect(Number.isInteger(value.population)).toBe(true);
    };
    // The recording's own answer passes the same check.
    check(recorded.message.content);
    const sync = JSON.parse((await send(sim, exchange.request)).text).choices[0];
    expect(sync.finish_reason).toBe(recorded.finish_reason);
    check(sync.message.content);
    // Streamed, the deltas join to the same JSON; cut short by max_tokens, it ends `length`.
    const streamed = await send(sim, {
      ...exchange.request,
      body: { ...(exchange.request.body as object), stream: true },
    });
    const deltas = streamed.text
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '');
    expect(deltas.join('')).toBe(sync.message.content);
    const cut = JSON.parse(
      (
        await send(sim, {
          ...exchange.request,
          body: { ...(exchange.request.body as object), max_tokens: 2 },
        })
      ).text,
    ).choices[0];
    expect(cut.finish_reason).toBe('length');
    expect(() => JSON.parse(cut.message.content)).toThrow();
  });

  it('chat-tools-required.json: the recorded envelope, with the call the recorded model could not make', async () => {
    const exchange: Exchange = recording('chat-tools-required.json');
    const answer = await send(sim, exchange.request);
    expect(answer.status).toBe(exchange.response.status);
    expectHeaders(answer, exchange.response.headers);
    const body = JSON.parse(answer.text);
    const recorded = exchange.response.body as any;
    const envelope = ({ choices: _, ...rest }: any) => shape(rest);
    expect(envelope(body)).toEqual(envelope(recorded));
    for (const answer of [recorded, body]) {
      expect(answer.usage.prompt_tokens_details.cached_tokens).toBe(answer.timings.cache_n);
      expect(answer.timings.predicted_n).toBe(answer.usage.completion_tokens);
    }
    // The recorded server answered text: its model had random weights and llama-server found no
    // tool-call syntax it could force (its README: "no tool-call parse was captured"). With a
    // template it recognises, "required" makes llama-server constrain the output to a call, and the
    // simulated model is such a model: it calls the only tool, on the city the user named.
    expect(recorded.choices[0].message.tool_calls).toBeUndefined();
    expect(body.choices).toEqual([
      {
        finish_reason: 'tool_calls',
        index: 0,
        message: {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
              id: expect.stringMatching(/^[0-9A-Za-z]{32}$/),
            },
          ],
        },
      },
    ]);
  });

  it('chat-n2.json: two choices, and usage that counts one of them, as llama-server does', async () => {
    const exchange: Exchange = recording('chat-n2.json');
    const request = exchange.request.body as { max_tokens: number; n: number };
    const recorded = exchange.response.body as any;
    const body = JSON.parse((await send(sim, exchange.request)).text);
    for (const answer of [recorded, body]) {
      expect(answer.choices).toHaveLength(request.n);
      expect(answer.usage.completion_tokens).toBe(request.max_tokens); // 8, not 16
    }
    expect(body.choices[0].message.content).not.toBe(body.choices[1].message.content);
  });

  it.each([
    ['chat-stream-include-usage.json', true],
    ['chat-stream-no-usage.json', true],
    ['chat-stream-with-role-chunk.json', false],
  ])('%s: the same events in the same order, each of the recorded structure', async (file, roleless) => {
    const exchange: Exchange = recording(file);
    const answer = await send(sim, exchange.request);
    expect(answer.status).toBe(exchange.response.status);
    expectHeaders(answer, exchange.response.headers);
    const recorded = payloads(exchange.response.sse_events as string[]);
    const events = payloads(streamEvents(answer.text));
    // Two of the recorded streams have no role chunk: llama-server sends it with the first token
    // it can send, and there the first token was an incomplete UTF-8 character, held back. The
    // simulator's text is always whole, so it always sends the role chunk, as llama-server does
    // for every other stream (chat-stream-with-role-chunk.json).
    const expected = sequence(recorded);
    expect(sequence(events)).toEqual(roleless ? ['role', ...expected] : expected);
    const mine = shapesByKind(events);
    const theirs = shapesByKind(recorded);
    for (const k of Object.keys(theirs)) expect(mine[k], k).toEqual(theirs[k]);
    if (!roleless) expect(mine.role).toEqual(theirs.role);
    expect(events.find((e) => kind(e) === 'role').choices[0].delta).toEqual({
      role: 'assistant',
      content: null,
    });
    // timings ride on the usage chunk, or on the finish chunk when no usage was asked for.
    const timed = events.filter((e) => e !== '[DONE]' && e.timings).map(kind);
    expect(timed).toEqual(recorded.filter((e) => e !== '[DONE]' && e.timings).map(kind));
  });

  it.each(['context_exceeded_sync', 'context_exceeded_stream'])(
    'error-context-exceeded.json %s: 400 JSON, not SSE, with the prompt and context sizes',
    async (name) => {
      const exchange: Exchange = recording('error-context-exceeded.json')[name];
      const body = expectSameJson(await send(sim, exchange.request), exchange.response);
      // The simulator's tokenizer counts the prompt its own way; the words are llama-server's.
      const { n_prompt_tokens: prompt, n_ctx: ctx } = body.error;
      expect(ctx).toBe(4096);
      expect(body).toEqual({
        error: {
          code: 400,
          message: `request (${prompt} tokens) exceeds the available context size (4096 tokens), try increasing it`,
          type: 'exceed_context_size_error',
          n_prompt_tokens: prompt,
          n_ctx: 4096,
        },
      });
    },
  );

  it.each([
    'bad_response_format_type',
    'bad_response_format_type_stream',
    'logprobs_wrong_type',
    'missing_messages',
    'invalid_json_body',
    'unknown_route',
  ])('error-bad-request.json %s: the very same answer', async (name) => {
    const exchange: Exchange = recording('error-bad-request.json')[name];
    const body = expectSameJson(await send(sim, exchange.request), exchange.response);
    expect(body).toEqual(exchange.response.body);
  });

  it.each([
    ['get-health.json', true],
    ['get-props.json', false],
    ['get-v1-models.json', false],
    ['get-slots.json', false],
  ])('%s: the same status, headers and body structure', async (file, same) => {
    const exchange: Exchange = recording(file);
    const body = expectSameJson(await send(sim, exchange.request), exchange.response);
    if (same) expect(body).toEqual(exchange.response.body);
  });

  it('get-props.json and get-v1-models.json: the context per slot and the slots, where routers read them', async () => {
    const props = (await (await fetch(`${sim.url}/props`)).json()) as any;
    expect(props).toMatchObject({
      default_generation_settings: { n_ctx: 4096 },
      total_slots: 2,
      model_alias: 'tiny',
    });
    const models = (await (await fetch(`${sim.url}/v1/models`)).json()) as any;
    expect(models.data).toEqual([expect.objectContaining({ id: 'tiny', owned_by: 'llamacpp' })]);
    expect(models.data[0].meta.n_ctx).toBe(4096);
    const slots = (await (await fetch(`${sim.url}/slots`)).json()) as any[];
    expect(slots.map((s) => [s.id, s.n_ctx])).toEqual([
      [0, 4096],
      [1, 4096],
    ]);
  });

  it.each(['plain', 'with_pieces'])('post-tokenize.json %s: {tokens}, ids or {id, piece}', async (name) => {
    const exchange: Exchange = recording('post-tokenize.json')[name];
    const answer = await send(sim, exchange.request);
    expect(answer.status).toBe(200);
    expectHeaders(answer, exchange.response.headers);
    const body = JSON.parse(answer.text);
    // llama-server's byte-level vocabulary splits é and 🌍 into bytes, given as byte arrays where a
    // piece is not UTF-8 alone; the simulator's tokens are whole characters, so its pieces are all
    // strings: each of its element structures is one of the recorded ones.
    const recorded = shape(exchange.response.body) as { tokens: { '[]': unknown[] } };
    const mine = shape(body) as { tokens: { '[]': unknown[] } };
    expect(Object.keys(mine)).toEqual(['tokens']);
    for (const element of mine.tokens['[]']) expect(recorded.tokens['[]']).toContainEqual(element);
  });

  it('get-metrics.txt: every llamacpp: series, with its type and help, as Prometheus text 0.0.4', async () => {
    const recorded = readFileSync(path.join(dir, 'get-metrics.txt'), 'utf8');
    const res = await fetch(`${sim.url}/metrics`);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4');
    const lines = (await res.text()).split('\n');
    const declared = recorded.split('\n').filter((line) => /^# (HELP|TYPE) llamacpp:/.test(line));
    expect(declared.length).toBeGreaterThan(20);
    for (const line of declared) expect(lines).toContain(line);
    for (const line of recorded.split('\n').filter((l) => l.startsWith('llamacpp:'))) {
      const name = line.split(' ')[0] as string;
      expect(lines.find((l) => l.startsWith(`${name} `))).toMatch(/^\S+ -?[\d.e+-]+$/);
    }
  });

  it('prompt-cache-shared-prefix.json: a shared system prompt is found in the cache by the next requests', async () => {
    const own = await startLlmSim(LLAMA);
    try {
      const exchanges: (Exchange & { summary: Record<string, number> })[] = recording(
        'prompt-cache-shared-prefix.json',
      );
      const cached: number[] = [];
      for (const exchange of exchanges) {
        const body = expectSameJson(await send(own, exchange.request), exchange.response);
        expect(body.usage.prompt_tokens_details.cached_tokens).toBe(body.timings.cache_n);
        cached.push(body.timings.cache_n / body.usage.prompt_tokens);
      }
      const recorded = exchanges.map(
        (e) => (e.summary['timings.cache_n'] as number) / (e.summary.prompt_tokens as number),
      );
      // Recorded: 8 of 1377, then 1351 of 1381 and of 1377. The simulator caches whole blocks of
      // 16 tokens, llama-server single tokens: the same story in coarser steps.
      for (const ratios of [recorded, cached]) {
        expect(ratios[0]).toBeLessThan(0.1);
        expect(ratios[1]).toBeGreaterThan(0.9);
        expect(ratios[2]).toBeGreaterThan(0.9);
      }
    } finally {
      await own.close();
    }
  });
});

describe('the llama.cpp flavor against the recorded disconnects and model load', () => {
  /** /slots' first slot, as the recording polled it. */
  const slot0 = async (sim: LlmSim) => ((await (await fetch(`${sim.url}/slots`)).json()) as any[])[0];

  /**
   * disconnect-nonstream-vs-stream.json, at 2 ms a token instead of 20 (the slow model's): the
   * client leaves about a third of the way through 300 tokens, and /slots is polled after.
   */
  async function leave(mode: 'non_streaming' | 'streaming') {
    const exchange = recording('disconnect-nonstream-vs-stream.json')[mode];
    const sim = await startLlmSim({ ...LLAMA, decodeMsPerToken: 2 });
    try {
      const leaving = new AbortController();
      const answer = fetch(`${sim.url}${exchange.request.path}`, {
        method: 'POST',
        body: JSON.stringify(exchange.request.body),
        signal: leaving.signal,
      }).then((res) => res.text());
      answer.catch(() => undefined);
      while ((await slot0(sim)).next_token[0].n_decoded < 80) await sleep(5);
      leaving.abort();
      await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
      const atLeaving = sim.stats().generationTokens;
      const timeline: any[] = [];
      const started = performance.now();
      do {
        const s = await slot0(sim);
        timeline.push({ is_processing: s.is_processing, n_decoded: s.next_token[0].n_decoded });
        await sleep(20);
      } while (timeline.at(-1).is_processing && performance.now() - started < 5000);
      // Each polled slot has the fields the recording shows.
      const recordedSlot = exchange.timeline.find((t: any) => t.slots).slots[0];
      expect(Object.keys(await slot0(sim))).toEqual(expect.arrayContaining(['id', 'is_processing']));
      expect(Object.keys(recordedSlot)).toEqual(['id', 'is_processing', 'n_decoded']);
      return { atLeaving, timeline, generated: sim.stats().generationTokens, exchange };
    } finally {
      await sim.close();
    }
  }

  it('non-streaming: the engine does not notice the client leave and decodes all 300 tokens', async () => {
    const { atLeaving, timeline, generated, exchange } = await leave('non_streaming');
    // Recorded: still processing after the abort, n_decoded growing, idle once 300 are done.
    const recorded = exchange.timeline.filter((t: any) => t.slots).map((t: any) => t.slots[0]);
    expect(recorded.at(0).is_processing).toBe(true);
    expect(recorded.at(-1).is_processing).toBe(false);
    expect(atLeaving).toBeLessThan(300);
    expect(generated).toBe(300);
    const decoding = timeline.filter((t) => t.is_processing).map((t) => t.n_decoded);
    expect(decoding.length).toBeGreaterThan(1);
    expect(decoding).toEqual([...decoding].sort((a, b) => a - b));
    expect(timeline.at(-1)).toEqual({ is_processing: false, n_decoded: 0 });
  });

  it('streaming: the engine stops as the client leaves', async () => {
    const { atLeaving, timeline, generated, exchange } = await leave('streaming');
    const recorded = exchange.timeline.filter((t: any) => t.slots).map((t: any) => t.slots[0]);
    expect(recorded.at(-1)).toMatchObject({ is_processing: false, n_decoded: 0 });
    expect(timeline.at(-1)).toEqual({ is_processing: false, n_decoded: 0 });
    // Idle at the first polls, with most of the 300 tokens (600 ms of decode) never generated.
    expect(timeline.length).toBeLessThanOrEqual(10);
    expect(generated).toBeLessThan(250);
    expect(generated - atLeaving).toBeLessThan(100);
  });

  it('get-health-during-model-load.json: 503 Loading model, then 200 ok', async () => {
    const recorded = recording('get-health-during-model-load.json').polls as any[];
    const sim = await startLlmSim({ ...LLAMA, loadMs: 300 });
    try {
      const polls: { status: number; body: unknown }[] = [];
      do {
        const res = await fetch(`${sim.url}/health`);
        polls.push({ status: res.status, body: await res.json() });
        await sleep(20);
      } while (polls.at(-1)?.status !== 200 && polls.length < 200);
      const collapse = (list: { status: number | string; body: unknown }[]) =>
        list.filter((p, i) => i === 0 || p.status !== list[i - 1]?.status);
      // The recording starts before llama-server listens (connection refused); a simulator is
      // listening once started, so the comparison starts at the first answer.
      const answered = collapse(recorded.filter((p) => typeof p.status === 'number'));
      expect(collapse(polls)).toEqual(
        answered.map((p) => ({ status: p.status, body: JSON.parse(p.body as string) })),
      );
      // While loading, chat is refused the same way.
      const loading = await startLlmSim({ ...LLAMA, loadMs: 2000 });
      const chat = await fetch(`${loading.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
      expect([chat.status, await chat.json()]).toEqual([503, JSON.parse(answered[0]?.body as string)]);
      await loading.close();
    } finally {
      await sim.close();
    }
  });
});
