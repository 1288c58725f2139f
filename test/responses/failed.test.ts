import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { takeEvents } from './take.js';

/**
 * A stream whose engine breaks off after the answer began ends with `response.failed`; its
 * response keeps what was streamed, the open item closed `incomplete`, so a client that builds the
 * final response from the terminal event does not lose the text it was shown.
 */
describe.each(storeCases)('a response that fails mid-stream ($name)', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1);
    // The engine's socket is destroyed after its sixth server-sent event.
    await sims[0]?.setFault({ kind: 'drop-mid-stream', afterChunks: 6 });
    kiln = await startTestServer(storeCase, { engines: { pool: engine('unique', sims) } });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it.skipIf(storeCase.skip)('response.failed carries the output streamed before the failure', async () => {
    for (const background of [false, true]) {
      const events = await takeEvents(
        await client.responses.create({
          model: 'm',
          input: 'Tell me about kilns.',
          stream: true,
          background,
        }),
      );
      const deltas = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : []));
      expect(deltas.length).toBeGreaterThan(0);
      const end = events.at(-1) as OpenAI.Responses.ResponseFailedEvent;
      expect(end.type).toBe('response.failed');
      expect(end.response.status).toBe('failed');
      expect(end.response.error?.message).toMatch(/broke off/);
      expect(end.response.output).toEqual([
        expect.objectContaining({
          type: 'message',
          status: 'incomplete',
          content: [expect.objectContaining({ type: 'output_text', text: deltas.join('') })],
        }),
      ]);
      expect(end.response.output_text).toBe(deltas.join(''));
      const done = events.filter((e) => e.type === 'response.output_item.done');
      expect(done).toHaveLength(1);
    }
  });
});
