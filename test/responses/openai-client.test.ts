import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

describe.each(storeCases)('the Responses API with the openai client ($name)', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1);
    // The simulated model stops at the end of its first sentence, as a model that ends its answer.
    kiln = await startTestServer(storeCase, {
      engines: { pool: engine('unique', sims) },
      personas: { brief: { model: 'm', defaults: { stop: ['.'] } } },
    });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it.skipIf(storeCase.skip)('responses.create answers output_text, and previous_response_id continues the conversation', async () => {
    const first = await client.responses.create({ model: 'm', input: 'Name a glaze.', max_output_tokens: 12 });
    expect(first.object).toBe('response');
    expect(first.id).toMatch(/^resp_/);
    expect(first.status).toBe('incomplete');
    expect(first.output_text.length).toBeGreaterThan(0);
    const second = await client.responses.create({
      model: 'm',
      input: 'And another?',
      previous_response_id: first.id,
      max_output_tokens: 12,
    });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.usage?.input_tokens).toBeGreaterThan(
      (first.usage?.input_tokens ?? 0) + (first.usage?.output_tokens ?? 0),
    );
  });

  it.skipIf(storeCase.skip)('responses.create with stream yields created, deltas and completed', async () => {
    const stream = await client.responses.create({ model: 'brief', input: 'Say something.', stream: true });
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types).toContain('response.output_text.delta');
    expect(types.at(-1)).toBe('response.completed');
    expect(completed?.output_text).toBe(text);
  });
});
