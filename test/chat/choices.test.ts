import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FlavorName, LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

/** `n: 2` through Kiln: the engine's two choices reach the caller in every mode. */
describe.each<FlavorName>(['vllm', 'llama.cpp'])('n choices through Kiln to a %s engine', (flavor) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;
  const request = {
    model: 'm',
    messages: [{ role: 'user' as const, content: 'Name a glaze.' }],
    max_tokens: 6,
    seed: 11,
    n: 2,
  };

  beforeAll(async () => {
    sims = await simPool(1, { flavor });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', sims) },
    });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  /** Two choices, index 0 and 1, each with its own text; their texts. */
  function expectTwo(choices: readonly { index: number; message: { content: string | null } }[]): string[] {
    expect(choices.map((c) => c.index)).toEqual([0, 1]);
    const texts = choices.map((c) => c.message.content ?? '');
    for (const text of texts) expect(text.length).toBeGreaterThan(0);
    expect(texts[0]).not.toBe(texts[1]);
    return texts;
  }

  let syncTexts: string[];
  let promptTokens: number;

  it('sync: the completion holds both choices', async () => {
    const completion = await client.chat.completions.create(request);
    syncTexts = expectTwo(completion.choices);
    for (const choice of completion.choices) expect(choice.finish_reason).toBe('length');
    // Both choices' tokens, the prompt once: vLLM counts them so; llama.cpp ends each choice with a
    // usage chunk of its own, which Kiln adds up.
    expect(completion.usage?.completion_tokens).toBe(12);
    expect(completion.usage?.total_tokens).toBe((completion.usage?.prompt_tokens ?? 0) + 12);
    promptTokens = completion.usage?.prompt_tokens ?? 0;
    expect(promptTokens).toBeGreaterThan(0);
  });

  it('stream: chunks for both indexes, each choice finished, the same texts (openai stream helper)', async () => {
    const stream = client.chat.completions.stream({ ...request, stream_options: { include_usage: true } });
    const indexes = new Set<number>();
    const finished: number[] = [];
    const usages: Array<{ usage: unknown; afterFinishes: number }> = [];
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      for (const choice of chunk.choices) {
        indexes.add(choice.index);
        if (choice.finish_reason) finished.push(choice.index);
      }
      if (chunk.usage) usages.push({ usage: chunk.usage, afterFinishes: finished.length });
    }
    expect([...indexes].sort()).toEqual([0, 1]);
    expect(finished.sort()).toEqual([0, 1]);
    // One usage chunk, for the whole request, once both choices are done, as OpenAI sends it.
    expect(usages).toEqual([
      {
        usage: expect.objectContaining({
          prompt_tokens: promptTokens,
          completion_tokens: 12,
          total_tokens: promptTokens + 12,
        }),
        afterFinishes: 2,
      },
    ]);
    const final = await stream.finalChatCompletion();
    expect(expectTwo(final.choices)).toEqual(syncTexts);
  });

  it('async: the job result holds both choices', async () => {
    const accepted = await kiln.call('POST', '/v1/chat/completions', { body: { ...request, mode: 'async' } });
    expect(accepted.status).toBe(202);
    let job: any;
    for (let i = 0; i < 250; i++) {
      job = (await kiln.call('GET', `/v1/jobs/${accepted.body.id}`)).body;
      if (job.status !== 'queued' && job.status !== 'running') break;
      await sleep(20);
    }
    expect(job.status).toBe('completed');
    expect(expectTwo(job.result.choices)).toEqual(syncTexts);
    expect(job.result.usage.completion_tokens).toBe(12);
    // The ledger counts what each answer said, both choices: the sync, the stream and this job.
    const usage = await kiln.call('GET', '/api/v1/usage');
    expect(usage.body.data).toMatchObject([{ kind: 'chat', jobs: 3, output_units: 36 }]);
  });
});
