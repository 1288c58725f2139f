import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

const LONG_PREAMBLE = `You are the assistant of a company that sells kilns. ${'Policy line. '.repeat(200)}`;

async function settle(kiln: TestServer, path: string): Promise<any> {
  for (let i = 0; i < 500; i++) {
    const { body } = await kiln.call('GET', path);
    if (['completed', 'failed', 'cancelled', 'timeout'].includes(body.status)) return body;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`job at ${path} never finished`);
}

describe('chat completions against a simulated fleet', () => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    const prefix = await simPool(2);
    const unique = await simPool(2);
    const long = await simPool(1, { contextWindow: 200_000 });
    sims = [...prefix, ...unique, ...long];
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: {
        'prefix-pool': engine('shared-prefix', prefix),
        'unique-pool': engine('unique', unique),
        'long-context': engine('long-context', long),
      },
      personas: {
        support: {
          model: 'm',
          system: LONG_PREAMBLE,
          shared_preamble: true,
          defaults: { max_tokens: 4 },
        },
        plain: { model: 'm', system: 'Be brief.' },
        capped: { model: 'm', defaults: { max_completion_tokens: 4 } },
        greedy: { model: 'm', defaults: { max_tokens: 10_000_000 } },
      },
      'routing.long_context_tokens': 4000,
      'security.allow_hosts': ['127.0.0.1'],
      'webhooks.retry_schedule': ['100ms'],
      'jobs.poll_interval_ms': 100,
    });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it('the official openai client runs a completion, a stream and models.list()', async () => {
    const completion = await client.chat.completions.create({
      model: 'plain',
      messages: [{ role: 'user', content: 'Say something.' }],
      max_tokens: 6,
      seed: 7,
    });
    expect(completion.id).toMatch(/^chatcmpl-[0-9a-f-]{36}$/);
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('plain');
    expect(completion.choices[0]?.message.content?.split(' ').length).toBeGreaterThanOrEqual(1);
    expect(completion.usage).toMatchObject({ completion_tokens: 6, total_tokens: expect.any(Number) });
    expect(Number.isInteger(completion.usage?.prompt_tokens)).toBe(true);

    const stream = await client.chat.completions.create({
      model: 'plain',
      messages: [{ role: 'user', content: 'Say something.' }],
      max_tokens: 6,
      seed: 7,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let chunks = 0;
    let usage: unknown;
    const usages: unknown[] = [];
    for await (const chunk of stream) {
      chunks++;
      usages.push(chunk.usage);
      expect(chunk.object).toBe('chat.completion.chunk');
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(chunks).toBeGreaterThan(3);
    expect(text).toBe(completion.choices[0]?.message.content);
    expect(usage).toMatchObject({ completion_tokens: 6 });
    // OpenAI's shape, which the engine's chunks lack: usage null on each chunk before the last.
    expect(usages.slice(0, -1)).toEqual(Array(chunks - 1).fill(null));

    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(['support', 'plain', 'm']));
    expect(models.data.find((m) => m.id === 'support')).toMatchObject({ kind: 'persona', ready: true });
  });

  it('async: 202 chatcmpl- job polled under both paths, and the webhook gets the same body', async () => {
    const received: string[] = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        received.push(body);
        res.end('ok');
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const accepted = await kiln.call('POST', '/v1/chat/completions', {
        body: {
          model: 'plain',
          mode: 'async',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 5,
          webhook: { url: hook, secret: 'a-long-secret' },
        },
      });
      expect(accepted.status).toBe(202);
      const uuid = accepted.body.polling_url.split('/').pop();
      expect(accepted.body).toEqual({
        id: `chatcmpl-${uuid}`,
        object: 'chat.completion.async',
        status: 'queued',
        polling_url: `/api/v1/jobs/${uuid}`,
        created: expect.any(Number),
      });
      const done = await settle(kiln, `/api/v1/jobs/${uuid}`);
      expect(done.status).toBe('completed');
      expect(done.result.choices[0].message.content).toEqual(expect.any(String));
      for (const field of ['prompt_tokens', 'completion_tokens', 'total_tokens']) {
        expect(Number.isInteger(done.result.usage[field])).toBe(true);
      }
      expect(done.result.id).toBe(`chatcmpl-${uuid}`);
      expect((await kiln.call('GET', `/v1/jobs/${uuid}`)).body).toEqual(done);
      for (let i = 0; i < 100 && received.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(received).toHaveLength(1);
      expect(JSON.parse(received[0] as string)).toEqual(done);
    } finally {
      receiver.close();
    }
  });

  it('routes shared prefixes, one-off prompts and long prompts to their pools', async () => {
    const route = async (body: Record<string, unknown>) => {
      const answer = await kiln.call('POST', '/v1/chat/completions', { body: { max_tokens: 2, ...body } });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      return answer.headers.get('x-kiln-route') ?? '';
    };
    // A persona that declares its preamble shared.
    expect(await route({ model: 'support', messages: [{ role: 'user', content: 'q1' }] })).toMatch(
      /class=shared-prefix; engine=prefix-pool/,
    );
    // One-off prompts.
    expect(
      await route({ model: 'm', messages: [{ role: 'user', content: `unique ${Math.random()}` }] }),
    ).toMatch(/class=unique; engine=unique-pool/);
    // A short system prompt that other requests sent before: unique the first time, then shared.
    const system = { role: 'system', content: `Shared manual. ${'Rule. '.repeat(60)}` };
    expect(await route({ model: 'm', messages: [system, { role: 'user', content: 'first' }] })).toMatch(
      /class=unique/,
    );
    expect(await route({ model: 'm', messages: [system, { role: 'user', content: 'second' }] })).toMatch(
      /class=shared-prefix; engine=prefix-pool/,
    );
    // A system prompt over routing.shared_prefix_tokens is shared-prefix on its first appearance.
    const manual = { role: 'system', content: `Long manual. ${'Rule. '.repeat(400)}` };
    expect(await route({ model: 'm', messages: [manual, { role: 'user', content: 'first' }] })).toMatch(
      /class=shared-prefix; engine=prefix-pool/,
    );
    // Over routing.long_context_tokens (4000 ≈ 16000 characters).
    expect(await route({ model: 'm', messages: [{ role: 'user', content: 'x '.repeat(12_000) }] })).toMatch(
      /class=long-context; engine=long-context/,
    );
  });

  it('a persona’s preamble and the request’s contexts are prepended', async () => {
    await kiln.call('POST', '/api/v1/contexts', { body: { name: 'house-style', content: 'w'.repeat(4000) } });
    const usage = async (body: Record<string, unknown>) =>
      (
        await kiln.call('POST', '/v1/chat/completions', {
          body: { max_tokens: 1, messages: [{ role: 'user', content: 'hi' }], ...body },
        })
      ).body.usage.prompt_tokens;
    const bare = await usage({ model: 'm' });
    expect(await usage({ model: 'm', contexts: ['house-style'] })).toBeGreaterThanOrEqual(bare + 1000);
    expect(await usage({ model: 'support' })).toBeGreaterThan(bare + 500);
    const missing = await kiln.call('POST', '/v1/chat/completions', {
      body: { model: 'm', contexts: ['nope'], messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(missing.status).toBe(400);
    expect(missing.body.error.details[0]).toMatchObject({ field: 'contexts[0]', rule: 'exists' });
  });

  it("an engine's refusal names the caller's own message, not its place after the persona's; param only where the engine named one", async () => {
    const refused = await kiln.call('POST', '/v1/chat/completions', {
      body: {
        model: 'plain',
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'tool', content: 'x' },
        ],
      },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('engine-rejected');
    // The persona's system message went first: the engine saw this one as messages[2].
    expect(refused.body.error.message).toContain('messages[1]');
    expect(refused.body.error.message).not.toContain('messages[2]');

    // An output limit past the window is the limit the caller sent; a persona's is no field of theirs.
    for (const [model, limits, param] of [
      ['plain', { max_tokens: 10_000_000 }, 'max_tokens'],
      ['plain', { max_completion_tokens: 10_000_000 }, 'max_completion_tokens'],
      ['greedy', {}, null],
    ] as const) {
      const tooMany = await kiln.call('POST', '/v1/chat/completions', {
        body: { model, messages: [{ role: 'user', content: 'hi' }], ...limits },
      });
      expect(tooMany.status).toBe(400);
      expect(tooMany.body.error).toMatchObject({ code: 'engine-rejected', param });
      expect(tooMany.body.error.details[0].field).toBe(param ?? 'body');
    }
  });

  it("a null is no value: stream: null is a sync answer, max_tokens: null keeps the persona's default", async () => {
    const answered = await kiln.call('POST', '/v1/chat/completions', {
      body: {
        model: 'support',
        messages: [{ role: 'user', content: 'Say something long.' }],
        stream: null,
        max_tokens: null,
      },
    });
    expect(answered.status, JSON.stringify(answered.body)).toBe(200);
    expect(answered.body.object).toBe('chat.completion');
    expect(answered.body.usage.completion_tokens).toBe(4);
    // The caller's limit under the other name replaces the default: the engine obeys the caller.
    for (const [model, limit] of [
      ['support', { max_completion_tokens: 7 }],
      ['capped', { max_tokens: 2 }],
      ['capped', { max_tokens: 7 }],
    ] as const) {
      const limited = await kiln.call('POST', '/v1/chat/completions', {
        body: { model, messages: [{ role: 'user', content: 'Say something long.' }], ...limit },
      });
      expect(limited.body.usage.completion_tokens).toBe(Object.values(limit)[0]);
    }
  });

  it('refuses what it cannot do with a clear 4xx', async () => {
    const post = (body: Record<string, unknown>) => kiln.call('POST', '/v1/chat/completions', { body });
    const unknown = await post({ model: 'gpt-17', messages: [{ role: 'user', content: 'hi' }] });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('model-not-found');
    const many = await post({ model: 'm', n: 17, messages: [{ role: 'user', content: 'hi' }] });
    expect(many.status).toBe(400);
    expect(many.body.error.details[0].field).toBe('n');
    const conflict = await post({
      model: 'm',
      stream: true,
      mode: 'async',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(conflict.status).toBe(400);
    // Options for a stream on a request that does not stream, as OpenAI refuses them.
    for (const unstreamed of [{}, { mode: 'async' }, { stream: false }]) {
      const options = await post({
        model: 'plain',
        ...unstreamed,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(options.status).toBe(400);
      expect(options.body.error.details[0]).toMatchObject({ field: 'stream_options', rule: 'mode' });
    }
    // A malformed tool is the caller's mistake, said here: an engine would answer it with a 5xx,
    // counted against its replica.
    for (const [body, field] of [
      [{ tools: [{ type: 'function' }] }, 'tools[0].function'],
      [{ tools: [{ type: 'function', function: { name: '' } }] }, 'tools[0].function.name'],
      [
        { tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] },
        'tools[0].function.parameters',
      ],
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ tool_choice: 'sometimes' }, 'tool_choice'],
    ] as const) {
      const refused = await post({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body });
      expect(refused.status, JSON.stringify(refused.body)).toBe(400);
      expect(refused.body.error.details.map((d: { field: string }) => d.field)).toContain(field);
    }
    const noMessages = await post({ model: 'm', messages: [] });
    expect(noMessages.status).toBe(400);
    const badRole = await post({ model: 'm', messages: [{ role: 'wizard', content: 'hi' }] });
    expect(badRole.status).toBe(400);
    const hot = await post({
      model: 'm',
      temperature: 3,
      top_p: 'high',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(hot.status).toBe(400);
    expect(hot.body.error.details).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          field: 'temperature',
          rule: 'maximum',
          message: 'temperature must be at most 2',
        }),
        expect.objectContaining({ field: 'top_p', rule: 'type', message: 'top_p must be a number or null' }),
      ]),
    );
    expect(noMessages.body.error.details[0]).toMatchObject({ field: 'messages', rule: 'min_items' });
  });
});
