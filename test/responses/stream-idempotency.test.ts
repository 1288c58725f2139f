import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeCases } from '../helpers/stores.js';
import { eventsOf, type ResponsesFleet, startResponsesFleet } from './fleet.js';

type Event = OpenAI.Responses.ResponseStreamEvent;

const weather: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** The event types in order, a run of deltas counted as one: what a replay must keep. */
const shapeOf = (events: Event[]) =>
  events.map((e) => e.type).filter((type, i, all) => !(type.endsWith('.delta') && all[i - 1] === type));

/** The terminal event's response. */
const endOf = (events: Event[]) => (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;

/**
 * A streamed response retried with its Idempotency-Key, once it completed, is that response's stream
 * again (DESIGN: the key on any POST that creates work), through OpenAI's own client, with every
 * event held to OpenAI's schema: the same items, ids, text and terminal response, without another
 * job or engine call.
 */
describe.each(storeCases)('a streamed response retried with its Idempotency-Key ($name)', (storeCase) => {
  let fleet: ResponsesFleet;
  let client: OpenAI;
  let key: string;

  beforeAll(async () => {
    if (storeCase.skip) return;
    fleet = await startResponsesFleet(storeCase);
    ({ client, key } = await fleet.client());
  });
  afterAll(async () => {
    await fleet?.close();
  });

  const responseJobs = async () =>
    (await fleet.kiln.call('GET', '/v1/jobs?kind=response&limit=100', { key })).body.data.length;

  async function streamed(body: OpenAI.Responses.ResponseCreateParamsStreaming, idempotencyKey: string) {
    const { data, response } = await client.responses
      .create(body, { headers: { 'Idempotency-Key': idempotencyKey } })
      .withResponse();
    return { events: await eventsOf(data), replayed: response.headers.get('idempotent-replayed') };
  }

  it.skipIf(storeCase.skip)(
    'a text answer, a background one and a tool call come back with the same items and response, numbered from 0',
    async () => {
      for (const body of [
        { model: 'm', input: 'Name three glazes.', max_output_tokens: 16, stream: true as const },
        // A background stream opens with the gateway's two events, again in the replay.
        {
          model: 'm',
          input: 'Name three glazes.',
          max_output_tokens: 16,
          stream: true as const,
          background: true,
        },
        {
          model: 'm',
          input: 'What is the weather in Lyon? Ask get_weather.',
          tools: [weather],
          stream: true as const,
        },
      ]) {
        const idempotencyKey = `resp-${Math.random().toString(36).slice(2)}`;
        const first = await streamed(body, idempotencyKey);
        expect(first.replayed).toBeNull();
        const jobs = await responseJobs();

        const again = await streamed(body, idempotencyKey);
        expect(again.replayed).toBe('true');
        expect(await responseJobs()).toBe(jobs);
        expect(shapeOf(again.events)).toEqual(shapeOf(first.events));
        expect(again.events.map((e) => e.sequence_number)).toEqual(again.events.map((_, i) => i));
        expect(endOf(again.events)).toEqual(endOf(first.events));
        const text = (events: Event[]) =>
          events.map((e) => (e.type === 'response.output_text.delta' ? e.delta : '')).join('');
        expect(text(again.events)).toBe(text(first.events));
        const added = (events: Event[]) =>
          events.flatMap((e) => (e.type === 'response.output_item.added' ? [e.item.id] : []));
        expect(added(again.events)).toEqual(added(first.events));
        // Each body answered what it is there for: text, or a call with its arguments.
        if (body.tools) expect(shapeOf(first.events)).toContain('response.function_call_arguments.done');
        else expect(text(first.events).length).toBeGreaterThan(0);
      }
    },
  );
});
