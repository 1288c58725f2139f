import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

/** What the official `openai` client, with its default retries, sees of engine refusals and long answers. */
describe('the openai client against engine refusals and long sync answers', () => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    // One small-context pool and no long-context pool: a prompt over the context has nowhere to go.
    sims = await simPool(1, { contextWindow: 1000, decodeMsPerToken: 50 });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', sims) },
      'jobs.sync_timeout': '1s',
    });
    // Default maxRetries (2): the client retries 5xx and 429, never a 400.
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  const jobCount = async () => (await kiln.call('GET', '/v1/jobs?limit=100')).body.data.length as number;

  it('a prompt over the engine’s context: one request, a 400 APIError in the engine’s words, one failed job', async () => {
    const before = await jobCount();
    const error = await client.chat.completions
      .create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'clay '.repeat(2000) }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    const apiError = error as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(400);
    expect(apiError.message).toMatch(/maximum context length is 1000 tokens/);
    expect((apiError.error as { code?: string }).code).toBe('engine-rejected');
    expect(await jobCount()).toBe(before + 1);
    const jobs = (await kiln.call('GET', '/v1/jobs?limit=1')).body.data;
    expect(jobs[0]).toMatchObject({ status: 'failed', code: 'engine-rejected' });
  });

  it('a sync chat lasting three times jobs.sync_timeout answers the completion', async () => {
    const started = Date.now();
    const completion = await client.chat.completions.create({
      model: 'm',
      max_tokens: 60,
      messages: [{ role: 'user', content: 'Tell me about glazes.' }],
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(2900);
    expect(completion.object).toBe('chat.completion');
    expect(completion.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(completion.usage?.completion_tokens).toBe(60);
  });
});
