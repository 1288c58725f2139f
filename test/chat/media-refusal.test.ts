import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

/**
 * An image sent to a llama.cpp replica whose model has no projector (`--mmproj`): llama-server
 * answers 500 in its own words. That is the request's fault, so the caller gets a 400 it will not
 * retry, the request is not tried on the other replica, and no replica is ejected for it.
 */
const PNG = `data:image/png;base64,${Buffer.from('89504e470d0a1a0a', 'hex').toString('base64')}`;
const WORDS =
  'image input is not supported - hint: if this is unexpected, you may need to provide the mmproj';

describe('an image for a llama.cpp model that cannot read one', () => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    sims = await simPool(2, { flavor: 'llama.cpp' });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', sims) },
    });
    // The openai client's own retries of a 5xx stay on: a 400 is not retried.
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it('the simulator answers as llama-server does: 500, server_error, its words', async () => {
    const answer = await fetch(`${sims[0]?.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: PNG } }] }],
      }),
    });
    expect(answer.status).toBe(500);
    expect(await answer.json()).toEqual({ error: { code: 500, message: WORDS, type: 'server_error' } });
  });

  it('is a 400 engine-rejected in the engine’s words, tried once, and ejects no replica', async () => {
    const errors = async () => {
      const text = (await kiln.call('GET', '/metrics')).body as string;
      return [...text.matchAll(/^kiln_engine_errors_total\{[^}]*kind="(\w+)"[^}]*\} (\d+)/gm)].map(
        ([, kind, n]) => [kind, Number(n)] as const,
      );
    };
    for (let i = 0; i < 4; i++) {
      const refused = await client.chat.completions
        .create({
          model: 'm',
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'What is this?' },
                { type: 'image_url', image_url: { url: PNG } },
              ],
            },
          ],
        })
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused).toMatchObject({ status: 400, code: 'engine-rejected', message: `400 ${WORDS}` });
    }
    // Four refusals, one try each, all `rejected`: none counted as the replica's failure.
    const counted = await errors();
    expect(counted.filter(([kind]) => kind !== 'rejected')).toEqual([]);
    expect(counted.reduce((sum, [, n]) => sum + n, 0)).toBe(4);
    // Both replicas still up, and text goes through.
    const metrics = (await kiln.call('GET', '/metrics')).body as string;
    const available = [...metrics.matchAll(/^kiln_replica_available\{[^}]*\} (\d+)/gm)].map(([, n]) => n);
    expect(available).toEqual(['1', '1']);
    const answer = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Say hello.' }],
      max_tokens: 4,
    });
    expect(answer.choices[0]?.message.content).toBeTruthy();
  });
});
