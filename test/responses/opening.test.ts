import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { expectValidStreamEvent } from '../helpers/openai-schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { takeEvents } from './take.js';

/**
 * A background stream opens as OpenAI's does: `response.created` and `response.queued`, the
 * response `queued`, the moment its job is stored, before any engine has produced a token. A client
 * that goes away then still has the id, and resumes from there.
 */

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/** Each prompt token takes this long to prefill: the first token is seconds away. */
const PREFILL_MS = 100;

const take = takeEvents;

const numbered = (events: StreamEvent[]) => events.map((e) => `${e.sequence_number} ${e.type}`);

describe.each(storeCases)('a background stream opens at once ($name)', (storeCase) => {
  let kiln: TestServer;
  let slow: LlmSim[];
  let broken: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    if (storeCase.skip) return;
    slow = await simPool(1, { prefillMsPerToken: PREFILL_MS, decodeMsPerToken: 1 });
    // Model `bad`'s only engine refuses every request: each run fails before any output.
    broken = await simPool(1);
    await broken[0]?.setFault({ kind: 'error', status: 400, message: 'this engine refuses it' });
    kiln = await startTestServer(storeCase, {
      engines: {
        pool: engine('unique', slow),
        broken: engine('unique', broken, { models: { bad: 'sim-model' } }),
      },
    });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll([...(slow ?? []), ...(broken ?? [])]);
  });

  it.skipIf(storeCase.skip)(
    'response.created and response.queued come before the first token; a client gone then resumes',
    async () => {
      const tokensBefore = slow[0]?.stats().generationTokens;
      const opening = await take(
        await client.responses.create({
          model: 'm',
          input: 'Tell me about kilns and the clay they fire.',
          max_output_tokens: 5,
          background: true,
          stream: true,
        }),
        2,
      );
      // The engine is still prefilling: not one token yet.
      expect(slow[0]?.stats().generationTokens).toBe(tokensBefore);
      expect(numbered(opening)).toEqual(['0 response.created', '1 response.queued']);
      const created = opening[0] as OpenAI.Responses.ResponseCreatedEvent;
      expect(created.response).toMatchObject({ status: 'queued', background: true, output: [] });
      expect((opening[1] as OpenAI.Responses.ResponseQueuedEvent).response).toEqual(created.response);
      const { id } = created.response;

      // The client went away with the id: the response runs on, and resumes after the opening.
      const rest = await take(await client.responses.retrieve(id, { stream: true, starting_after: 1 }));
      const events = [...opening, ...rest];
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      expect(rest[0]).toMatchObject({
        type: 'response.in_progress',
        response: { id, status: 'in_progress' },
      });
      expect(rest.at(-1)?.type).toBe('response.incomplete');
      expect(rest.filter((e) => e.type === 'response.output_text.delta')).toHaveLength(5);

      // From the start, or from the first event, the stream is the same events.
      const whole = await take(await client.responses.retrieve(id, { stream: true }));
      expect(whole).toEqual(events);
      const afterCreated = await take(
        await client.responses.retrieve(id, { stream: true, starting_after: 0 }),
      );
      expect(afterCreated).toEqual(events.slice(1));
    },
    20_000,
  );

  it.skipIf(storeCase.skip)(
    'cancelled while its engine prefills: the opening, then an error event numbered next',
    async () => {
      const stream = await client.responses.create({
        model: 'm',
        input: 'Tell me about kilns and the clay they fire.',
        background: true,
        stream: true,
      });
      const events: StreamEvent[] = [];
      for await (const event of stream) {
        expectValidStreamEvent(event);
        events.push(event);
        if (events.length === 2) {
          const { id } = (events[0] as OpenAI.Responses.ResponseCreatedEvent).response;
          expect((await client.responses.cancel(id)).status).toBe('cancelled');
        }
      }
      expect(numbered(events)).toEqual(['0 response.created', '1 response.queued', '2 error']);
      expect(events.at(-1)).toMatchObject({ code: 'cancelled' });
    },
    20_000,
  );

  it.skipIf(storeCase.skip)(
    'a failure before any output is a response.failed event after the opening, not a cut stream',
    async () => {
      const events = await take(
        await client.responses.create({ model: 'bad', input: 'hello', background: true, stream: true }),
      );
      expect(numbered(events)).toEqual(['0 response.created', '1 response.queued', '2 response.failed']);
      const failed = (events[2] as OpenAI.Responses.ResponseFailedEvent).response;
      expect(failed.status).toBe('failed');
      expect(failed.error?.message).toContain('this engine refuses it');
      expect((await client.responses.retrieve(failed.id)).status).toBe('failed');
    },
    20_000,
  );
});
