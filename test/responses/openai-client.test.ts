import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI, { type APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countTokens, renderChatPrompt } from '../../src/sim/llm/text.js';
import { expectEngineStopped, until } from '../chat/fleet.js';
import { expectValidInputItemList } from '../helpers/openai-schema.js';
import { storeCases } from '../helpers/stores.js';
import { eventsOf, type ResponsesFleet, startResponsesFleet, valid } from './fleet.js';

/**
 * The Responses API as OpenAI's own client sees it, over HTTP, on every store. The simulated engine
 * reports prompt tokens of the chat template it rendered (`<|role|>content\n` a message), with a
 * tokenizer the tests can run too: so a prompt token count proves what the engine was sent. Every
 * Response object and stream event received is held to OpenAI's published schemas.
 */

/** Prompt tokens the simulated engine counts for these messages. */
const promptTokens = (messages: Array<{ role: string; content: string }>) =>
  countTokens(renderChatPrompt(messages));

/** The response's usage, which a finished response always has. */
function usageOf(response: OpenAI.Responses.Response): OpenAI.Responses.ResponseUsage {
  expect(response.usage).toEqual(expect.objectContaining({ input_tokens: expect.any(Number) }));
  return response.usage as OpenAI.Responses.ResponseUsage;
}

describe.each(storeCases)('the Responses API with the openai client ($name)', (storeCase) => {
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

  it.skipIf(storeCase.skip)(
    "the client's include on retrieve and input_items is taken; a stream cut by max_output_tokens closes its message incomplete",
    async () => {
      const events = await eventsOf(
        await client.responses.create({
          model: 'm',
          input: 'Name a glaze.',
          max_output_tokens: 3,
          stream: true,
        }),
      );
      const done = events.filter((e) => e.type === 'response.output_item.done');
      expect(done).toHaveLength(1);
      const last = events.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
      expect(last.type).toBe('response.incomplete');
      // The item as it is closed is the item as the response stores it.
      expect((done[0] as OpenAI.Responses.ResponseOutputItemDoneEvent).item).toEqual(last.response.output[0]);
      expect(last.response.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });

      const id = last.response.id;
      const got = await valid(client.responses.retrieve(id, { include: ['message.output_text.logprobs'] }));
      expect(got.id).toBe(id);
      const items = await client.responses.inputItems.list(id, {
        include: ['message.input_image.image_url'],
      });
      expect(items.data).toHaveLength(1);
    },
  );

  it.skipIf(storeCase.skip)(
    'responses.create answers output_text; previous_response_id sends the engine the first turn, and input_items lists only the second',
    async () => {
      const first = await valid(
        client.responses.create({ model: 'm', input: 'Name a glaze.', max_output_tokens: 12 }),
      );
      expect(first).toMatchObject({ object: 'response', status: 'incomplete', previous_response_id: null });
      expect(first.id).toMatch(/^resp_/);
      expect(first.output_text.length).toBeGreaterThan(0);
      const firstUsage = usageOf(first);
      expect(firstUsage).toMatchObject({ output_tokens: 12, total_tokens: firstUsage.input_tokens + 12 });
      expect(firstUsage.input_tokens).toBe(promptTokens([{ role: 'user', content: 'Name a glaze.' }]));

      const second = await valid(
        client.responses.create({
          model: 'm',
          input: 'And another?',
          previous_response_id: first.id,
          max_output_tokens: 12,
        }),
      );
      expect(second.previous_response_id).toBe(first.id);
      expect(second.output_text.length).toBeGreaterThan(0);
      const secondInput = usageOf(second).input_tokens;
      expect(secondInput).toBeGreaterThan(firstUsage.input_tokens + firstUsage.output_tokens);
      // Exactly the first turn's question and answer, then the second question: nothing else, nothing lost.
      expect(secondInput).toBe(
        promptTokens([
          { role: 'user', content: 'Name a glaze.' },
          { role: 'assistant', content: first.output_text },
          { role: 'user', content: 'And another?' },
        ]),
      );

      const items = await client.get<OpenAI.Responses.ResponseItemList>(
        `/responses/${second.id}/input_items`,
        { query: { order: 'asc' } },
      );
      expectValidInputItemList(items);
      expect(items.data).toHaveLength(1);
      expect(items.data[0]).toMatchObject({
        type: 'message',
        role: 'user',
        content: [{ type: 'input_text', text: 'And another?' }],
      });
      expect(items.data[0]?.id).toMatch(/^msg_/);
    },
  );

  it.skipIf(storeCase.skip)(
    'a stream yields every lifecycle event, numbered 0, 1, 2… without a gap, and its deltas are the completed output_text',
    async () => {
      const events = await eventsOf(
        await client.responses.create({ model: 'brief', input: 'Say something.', stream: true }),
      );
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      const deltas = events.filter((e) => e.type === 'response.output_text.delta');
      expect(deltas.length).toBeGreaterThan(1);
      expect(events.map((e) => e.type)).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        ...deltas.map(() => 'response.output_text.delta'),
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ]);
      const text = deltas.map((e) => e.delta).join('');
      const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
      expect(completed.response.status).toBe('completed');
      expect(completed.response.output_text).toBe(text);
      const itemId = completed.response.output[0]?.id;
      for (const e of events) if ('item_id' in e) expect(e.item_id).toBe(itemId);
      expect(events.find((e) => e.type === 'response.output_text.done')).toMatchObject({ text });
      // The item starts with no part, as OpenAI's does: the part comes with content_part.added.
      expect(events.find((e) => e.type === 'response.output_item.added')).toMatchObject({
        item: { id: itemId, type: 'message', status: 'in_progress', content: [] },
      });
      expect(events.find((e) => e.type === 'response.output_item.done')).toMatchObject({
        item: { id: itemId, type: 'message', status: 'completed', content: [{ type: 'output_text', text }] },
      });
      // What the stream ended with is what is stored.
      expect(await valid(client.responses.retrieve(completed.response.id))).toEqual(completed.response);
    },
  );

  it.skipIf(storeCase.skip)(
    'background: answered queued at once, retrieve reaches completed, and the same job is in /v1/jobs',
    async () => {
      const accepted = await valid(
        client.responses.create({ model: 'brief', input: 'Name a glaze.', background: true }),
      );
      expect(['queued', 'in_progress']).toContain(accepted.status);
      expect(accepted).toMatchObject({ background: true, output: [], completed_at: null });
      expect(accepted.usage ?? null).toBeNull();
      await until(
        async () => (await valid(client.responses.retrieve(accepted.id))).status === 'completed',
        5000,
        'the background response finishing',
      );
      const done = await valid(client.responses.retrieve(accepted.id));
      expect(done.output_text.length).toBeGreaterThan(0);
      expect(done.usage?.output_tokens).toBeGreaterThan(0);

      const job = await fleet.kiln.call('GET', `/v1/jobs/${accepted.id}`, { key });
      expect(job.status).toBe(200);
      expect(job.body).toMatchObject({
        id: accepted.id,
        object: 'job',
        kind: 'response',
        status: 'completed',
      });
      expect(job.body.result).toEqual(done);
      const list = await fleet.kiln.call('GET', '/v1/jobs?kind=response&limit=100', { key });
      expect(list.body.data.map((j: { id: string }) => j.id)).toContain(accepted.id);
      expect(list.body.data.every((j: { kind: string }) => j.kind === 'response')).toBe(true);
    },
  );

  it.skipIf(storeCase.skip)(
    'responses.cancel stops a running background response, and the engine stops generating',
    async () => {
      const MAX = 2000;
      const before = fleet.slow.stats().generationTokens;
      const accepted = await valid(
        client.responses.create({
          model: 'slow',
          input: 'Tell me a long story.',
          background: true,
          max_output_tokens: MAX,
        }),
      );
      await until(() => fleet.slow.stats().generationTokens - before >= 10, 5000, 'generation under way');
      expect((await valid(client.responses.retrieve(accepted.id))).status).toBe('in_progress');

      const cancelled = await valid(client.responses.cancel(accepted.id));
      expect(cancelled).toMatchObject({ id: accepted.id, status: 'cancelled', error: null });
      const generated = (await expectEngineStopped(fleet.slow)) - before;
      expect(generated).toBeGreaterThanOrEqual(10);
      expect(generated).toBeLessThan(MAX / 10);
      await sleep(200);
      expect((await valid(client.responses.retrieve(accepted.id))).status).toBe('cancelled');
      // Cancelling again answers the same cancelled response.
      expect((await valid(client.responses.cancel(accepted.id))).status).toBe('cancelled');
    },
  );

  it.skipIf(storeCase.skip)('cancelling a response that is not a background one is a 400', async () => {
    const done = await valid(client.responses.create({ model: 'brief', input: 'Say something.' }));
    const refused = await client.responses.cancel(done.id).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as APIError).message).toMatch(/background/);
    expect((await valid(client.responses.retrieve(done.id))).status).toBe('completed');
  });

  it.skipIf(storeCase.skip)(
    'responses.delete: the response, its input items and its job are gone; the usage ledger still counts it once',
    async () => {
      const { client: own, key: ownKey } = await fleet.client();
      const response = await valid(own.responses.create({ model: 'brief', input: 'Say something.' }));
      await own.responses.delete(response.id);

      await expect(own.responses.retrieve(response.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      await expect(own.responses.inputItems.list(response.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      const continued = await own.responses
        .create({ model: 'brief', input: 'And then?', previous_response_id: response.id })
        .catch((e: unknown) => e);
      expect(continued).toBeInstanceOf(OpenAI.NotFoundError);
      expect((continued as APIError).param).toBe('previous_response_id');
      await expect(own.responses.delete(response.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);

      const job = await fleet.kiln.call('GET', `/v1/jobs/${response.id}`, { key: ownKey });
      expect(job.status).toBe(410);
      expect(job.body.error.code).toBe('job-expired');
      const usage = await fleet.kiln.call('GET', '/api/v1/usage', { key: ownKey });
      expect(usage.body.data).toEqual([
        expect.objectContaining({
          kind: 'response',
          jobs: 1,
          completed: 1,
          input_units: response.usage?.input_tokens,
          output_units: response.usage?.output_tokens,
        }),
      ]);
    },
  );
});
