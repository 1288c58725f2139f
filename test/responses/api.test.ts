import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../chat/fleet.js';
import {
  expectValidDeletedResponse,
  expectValidInputItemList,
  expectValidResponse,
} from '../helpers/openai-schema.js';
import type { TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { type ResponsesFleet, startResponsesFleet } from './fleet.js';

const PNG = `data:image/png;base64,${Buffer.from('89504e470d0a1a0a', 'hex').toString('base64')}`;

/** The Responses API over plain HTTP, on every store: one organisation's responses, and refusals. */
describe.each(storeCases)('the Responses API over HTTP ($name)', (storeCase) => {
  let fleet: ResponsesFleet;

  beforeAll(async () => {
    if (storeCase.skip) return;
    fleet = await startResponsesFleet(storeCase);
  });
  afterAll(async () => {
    await fleet?.close();
  });

  /** An answer whose body, when it is a 200, is held to OpenAI's schema for it. */
  const checked = async (
    answer: ReturnType<TestServer['call']>,
    expectValid: (body: unknown) => void,
  ): ReturnType<TestServer['call']> => {
    const got = await answer;
    if (got.status === 200) expectValid(got.body);
    return got;
  };
  const create = (key: string, body: Record<string, unknown>) =>
    checked(fleet.kiln.call('POST', '/v1/responses', { key, body }), expectValidResponse);
  const retrieve = (key: string, id: string) =>
    checked(fleet.kiln.call('GET', `/v1/responses/${id}`, { key }), expectValidResponse);
  const inputItems = (key: string, id: string) =>
    checked(fleet.kiln.call('GET', `/v1/responses/${id}/input_items`, { key }), expectValidInputItemList);

  /** A 404 as for a response that never existed: the error says nothing of the other organisation's. */
  const notFound = (id: string, param: string | null = null) => ({
    status: 404,
    body: {
      error: {
        type: 'not_found_error',
        code: 'not-found',
        message: `no response '${id}' in this organisation`,
        param,
      },
    },
  });

  it.skipIf(storeCase.skip)(
    "another organisation's key gets a 404 for everything about a response, which stays as it was",
    async () => {
      const owner = (await fleet.client()).key;
      const other = await fleet.kiln.key('other-org');
      const done = await create(owner, { model: 'brief', input: 'Say something.' });
      expect(done.status).toBe(200);
      const id = done.body.id as string;
      const items = await inputItems(owner, id);
      // A background response still running: a cancel or delete that got through would end it.
      const running = (
        await create(owner, { model: 'slow', input: 'Hi.', background: true, max_output_tokens: 30 })
      ).body.id as string;
      await until(
        async () => (await retrieve(owner, running)).body.status === 'in_progress',
        5000,
        'the run',
      );

      expect(await retrieve(other, id)).toMatchObject(notFound(id));
      expect(await inputItems(other, id)).toMatchObject(notFound(id));
      expect(await fleet.kiln.call('DELETE', `/v1/responses/${id}`, { key: other })).toMatchObject(
        notFound(id),
      );
      expect(
        await create(other, { model: 'brief', input: 'And then?', previous_response_id: id }),
      ).toMatchObject(notFound(id, 'previous_response_id'));
      expect(await fleet.kiln.call('POST', `/v1/responses/${running}/cancel`, { key: other })).toMatchObject(
        notFound(running),
      );
      expect(await fleet.kiln.call('DELETE', `/v1/responses/${running}`, { key: other })).toMatchObject(
        notFound(running),
      );
      expect((await fleet.kiln.call('GET', `/v1/jobs/${id}`, { key: other })).status).toBe(404);
      // The same answer as for an id nobody has.
      const nobodys = `resp_${randomUUID()}`;
      expect(await retrieve(other, nobodys)).toMatchObject(notFound(nobodys));

      expect(await retrieve(owner, id)).toEqual({ ...done, headers: expect.anything() });
      expect((await inputItems(owner, id)).body).toEqual(items.body);
      await until(
        async () => (await retrieve(owner, running)).body.status !== 'in_progress',
        5000,
        'the end',
      );
      expect((await retrieve(owner, running)).body).toMatchObject({ status: 'incomplete', error: null });
    },
  );

  it.skipIf(storeCase.skip)(
    'cancelling a background response that already ended is 409 naming the response, with it attached',
    async () => {
      const { key } = await fleet.client();
      const { id } = (await create(key, { model: 'brief', input: 'Hi.', background: true })).body as {
        id: string;
      };
      await until(async () => (await retrieve(key, id)).body.status === 'completed', 5000, 'the end');
      const refused = await fleet.kiln.call('POST', `/v1/responses/${id}/cancel`, { key });
      expect(refused.status).toBe(409);
      expect(refused.body.error).toMatchObject({
        code: 'job-already-terminal',
        message: `response ${id} is already completed`,
      });
      expect(refused.body.response).toEqual((await retrieve(key, id)).body);
      expect(refused.body).not.toHaveProperty('job');
    },
  );

  it.skipIf(storeCase.skip)(
    'tool_choice without tools: auto and none answer, required and a function without a name are 400s naming the field',
    async () => {
      const { key } = await fleet.client();
      for (const tool_choice of ['auto', 'none']) {
        const answered = await create(key, { model: 'brief', input: 'Hi.', tool_choice, tools: [] });
        expect(answered.status, JSON.stringify(answered.body)).toBe(200);
      }
      const required = await create(key, { model: 'brief', input: 'Hi.', tool_choice: 'required' });
      expect(required.status).toBe(400);
      expect(required.body.error).toMatchObject({ code: 'validation-failed', param: 'tool_choice' });
      const nameless = await create(key, { model: 'brief', input: 'Hi.', tool_choice: { type: 'function' } });
      expect(nameless.status).toBe(400);
      expect(nameless.body.error).toMatchObject({
        param: 'tool_choice.name',
        message: expect.stringContaining('needs the name of a tool'),
      });
    },
  );

  it.skipIf(storeCase.skip)(
    'cancelling a response that ended incomplete says so, in the words of responses',
    async () => {
      const { key } = await fleet.client();
      const body = { model: 'm', input: 'Hi.', background: true, max_output_tokens: 3 };
      const { id } = (await create(key, body)).body as { id: string };
      await until(async () => (await retrieve(key, id)).body.status === 'incomplete', 5000, 'the end');
      // Only a completed response has a completion time, as OpenAI's Response says.
      expect((await retrieve(key, id)).body).toMatchObject({
        incomplete_details: { reason: 'max_output_tokens' },
        completed_at: null,
      });
      const refused = await fleet.kiln.call('POST', `/v1/responses/${id}/cancel`, { key });
      expect(refused.status).toBe(409);
      expect(refused.body.error.message).toBe(`response ${id} is already incomplete`);
    },
  );

  it.skipIf(storeCase.skip)('DELETE answers the deletion object; a second DELETE is a 404', async () => {
    const { key } = await fleet.client();
    const { id } = (await create(key, { model: 'brief', input: 'Say something.' })).body as { id: string };
    const deleted = await fleet.kiln.call('DELETE', `/v1/responses/${id}`, { key });
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ id, object: 'response', deleted: true });
    expectValidDeletedResponse(deleted.body);
    expect(await fleet.kiln.call('DELETE', `/v1/responses/${id}`, { key })).toMatchObject(notFound(id));
  });

  it.skipIf(storeCase.skip)(
    "an item_reference is the stored item itself; another organisation's item, or none, is a 400 naming it",
    async () => {
      const owner = (await fleet.client()).key;
      const other = (await fleet.client()).key;
      const first = await create(owner, { model: 'brief', input: 'Say something.' });
      const answer = first.body.output[0] as { id: string; content: Array<{ text: string }> };
      const next = await create(owner, {
        model: 'brief',
        input: [
          { type: 'item_reference', id: answer.id },
          { role: 'user', content: 'Go on.' },
        ],
      });
      expect(next.status).toBe(200);
      const listed = await fleet.kiln.call('GET', `/v1/responses/${next.body.id}/input_items?order=asc`, {
        key: owner,
      });
      expect(listed.body.data[0]).toMatchObject({
        id: answer.id,
        role: 'assistant',
        content: answer.content,
      });

      const unknown = `msg_${randomUUID().replaceAll('-', '')}8000`;
      for (const [key, id] of [
        [other, answer.id],
        [owner, unknown],
        [owner, 'msg_not-one-of-ours'],
      ] as const) {
        const refused = await create(key, { model: 'brief', input: [{ type: 'item_reference', id }] });
        expect(refused.status).toBe(400);
        expect(refused.body.error).toMatchObject({ code: 'validation-failed', param: 'input[0].id' });
        expect(refused.body.error.message).toContain(id);
      }
    },
  );

  it.skipIf(storeCase.skip)(
    'says where it ran in x-kiln-route, as chat does, answered and streamed',
    async () => {
      const { key } = await fleet.client();
      const answered = await create(key, { model: 'brief', input: 'Say something.' });
      expect(answered.headers.get('x-kiln-route')).toMatch(
        /^class=\w+; engine=\S+; replica=0; overflow=false/,
      );
      const streamed = await fleet.kiln.call('POST', '/v1/responses', {
        key,
        body: { model: 'brief', input: 'Say something.', stream: true },
      });
      expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(streamed.headers.get('x-kiln-route')).toMatch(/^class=\w+; engine=\S+; replica=0/);
    },
  );

  it.skipIf(storeCase.skip)(
    'after a delete: a replayed Idempotency-Key is a 410, and a conversation through the deleted turn a 404',
    async () => {
      const { key } = await fleet.client();
      const body = { model: 'brief', input: 'Say something.' };
      const headers = { 'idempotency-key': `k-${randomUUID()}` };
      const first = await fleet.kiln.call('POST', '/v1/responses', { key, body, headers });
      const second = await create(key, { ...body, previous_response_id: first.body.id });
      await fleet.kiln.call('DELETE', `/v1/responses/${first.body.id}`, { key });

      const replayed = await fleet.kiln.call('POST', '/v1/responses', { key, body, headers });
      expect(replayed.status).toBe(410);
      expect(replayed.body.error).toMatchObject({ code: 'job-expired', param: 'Idempotency-Key' });
      const jobs = (await fleet.kiln.call('GET', '/v1/jobs?limit=100', { key })).body.data.length;
      const continued = await create(key, { ...body, previous_response_id: second.body.id });
      expect(continued.status).toBe(404);
      expect(continued.body.error).toMatchObject({ code: 'not-found', param: 'previous_response_id' });
      expect(continued.body.error.message).toContain(first.body.id);
      // Refused before any job existed.
      expect((await fleet.kiln.call('GET', '/v1/jobs?limit=100', { key })).body.data.length).toBe(jobs);
    },
  );

  const weather = {
    type: 'function',
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  };
  const refusals: Array<[string, Record<string, unknown>, string, string, RegExp]> = [
    [
      'an OpenAI hosted tool, by name',
      { tools: [{ type: 'web_search' }] },
      'tools[0].type',
      'unsupported',
      /'web_search' is one of OpenAI's hosted tools/,
    ],
    ['a conversation', { conversation: 'conv_123' }, 'conversation', 'unsupported', /previous_response_id/],
    ['an empty input', { input: [] }, 'input', 'minItems', /at least one item/],
    [
      'an input of reasoning items alone',
      { input: [{ type: 'reasoning', id: 'rs_1', summary: [] }] },
      'input',
      'minItems',
      /at least one item/,
    ],
    [
      'an input item of an unknown type',
      { input: [{ type: 'telepathy', content: 'hi' }] },
      'input[0].type',
      'unsupported',
      /'telepathy'/,
    ],
    [
      'a refusal part without its refusal, by the field it lacks',
      { input: [{ role: 'assistant', content: [{ type: 'refusal', text: 'No.' }] }] },
      'input[0].content[0].refusal',
      'type',
      /needs a string refusal/,
    ],
    [
      'a content part of an unknown type',
      { input: [{ role: 'user', content: [{ type: 'input_video' }] }] },
      'input[0].content[0].type',
      'enum',
      /input_text, input_image, output_text or refusal/,
    ],
    // A nullable or union field names what is wrong inside the value, not that it is not null.
    [
      'a json_schema format whose schema is no object',
      { text: { format: { type: 'json_schema', name: 'x', schema: [] } } },
      'text.format.schema',
      'type',
      /^text\.format\.schema must be an object$/,
    ],
    [
      'an input item whose type is a number',
      { input: [{ type: 5 }] },
      'input[0].type',
      'type',
      /^input\[0\]\.type must be a string or null$/,
    ],
    [
      'a metadata value that is a number',
      { metadata: { k: 1 } },
      'metadata.k',
      'type',
      /^metadata\.k must be a string$/,
    ],
    [
      'a function tool whose strict is no boolean',
      { tools: [{ ...weather, strict: 'yes' }] },
      'tools[0].strict',
      'type',
      /^tools\[0\]\.strict must be a boolean$/,
    ],
    [
      'a background response not stored',
      { background: true, store: false },
      'store',
      'conflict',
      /background needs store true/,
    ],
    [
      'a tool_choice naming a function not among the tools',
      { tools: [weather], tool_choice: { type: 'function', name: 'get_time' } },
      'tool_choice.name',
      'exists',
      /'get_time'/,
    ],
  ];

  it.skipIf(storeCase.skip).each(refusals)(
    'refuses %s with a 400 naming the field',
    async (_what, fields, param, rule, message) => {
      const { key } = await fleet.client();
      const requests = fleet.quick.stats().requests;
      const refused = await create(key, { model: 'm', input: 'What is the weather in Lyon?', ...fields });
      expect(refused.status).toBe(400);
      expect(refused.body).toEqual({
        error: {
          type: 'invalid_request_error',
          code: 'validation-failed',
          message: expect.stringMatching(message),
          param,
          details: [expect.objectContaining({ field: param, rule, message: expect.stringMatching(message) })],
        },
      });
      // Nothing ran: no job, no request to the engine.
      expect((await fleet.kiln.call('GET', '/v1/jobs', { key })).body.data).toEqual([]);
      expect(fleet.quick.stats().requests).toBe(requests);
    },
  );

  it.skipIf(storeCase.skip)(
    "an engine's refusal names the input item at fault, not its message's place in what the engine was sent",
    async () => {
      const { key } = await fleet.client();
      const first = await create(key, { model: 'm', input: 'Say something.', max_output_tokens: 16 });
      expect(first.status).toBe(200);
      // Instructions and the earlier turn (its input and its output) go before this input; the
      // simulated model is text-only and refuses the image, the third part of input[1].
      const refused = await create(key, {
        model: 'm',
        previous_response_id: first.body.id,
        instructions: 'Be brief.',
        input: [
          { role: 'user', content: 'Look.' },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'This ' },
              { type: 'input_text', text: 'one:' },
              { type: 'input_image', image_url: PNG },
            ],
          },
        ],
      });
      expect(refused.status, JSON.stringify(refused.body)).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 'engine-rejected', param: 'input[1].content' });
      expect(refused.body.error.message).toContain('input[1].content[2]');
      expect(refused.body.error.message).not.toContain('messages[');
    },
  );

  it.skipIf(storeCase.skip)(
    'input_items pages with after; an after that is none of the items is a 400 naming it, not an empty page',
    async () => {
      const { key } = await fleet.client();
      const made = await create(key, {
        model: 'm',
        max_output_tokens: 16,
        input: ['one', 'two', 'three'].map((text) => ({ role: 'user', content: text })),
      });
      expect(made.status).toBe(200);
      const page = (query: string) =>
        fleet.kiln.call('GET', `/v1/responses/${made.body.id}/input_items?order=asc&limit=1${query}`, {
          key,
        });
      const first = await page('');
      expect(first.body).toMatchObject({ has_more: true, data: [{ content: [{ text: 'one' }] }] });
      const second = await page(`&after=${first.body.last_id}`);
      expect(second.body).toMatchObject({ has_more: true, data: [{ content: [{ text: 'two' }] }] });
      const wrong = await page('&after=msg_none');
      expect(wrong.status).toBe(400);
      expect(wrong.body.error).toMatchObject({ code: 'validation-failed', param: 'after' });
      expect(wrong.body.error.message).toMatch(/input items/);
    },
  );

  it.skipIf(storeCase.skip)(
    'an input longer than the context is refused naming input, where a chat names messages; a limit past it names the limit',
    async () => {
      const { key } = await fleet.client();
      // The simulated replica's context is 32,768 tokens, a word each.
      const refused = await create(key, { model: 'm', input: 'word '.repeat(40_000) });
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({
        code: 'engine-rejected',
        param: 'input',
        message: expect.stringMatching(/maximum context length/),
      });
      expect(refused.body.error.details[0]).toMatchObject({ field: 'input' });
      const chat = await fleet.kiln.call('POST', '/v1/chat/completions', {
        key,
        body: { model: 'm', messages: [{ role: 'user', content: 'word '.repeat(40_000) }] },
      });
      expect(chat.status).toBe(400);
      expect(chat.body.error).toMatchObject({ code: 'engine-rejected', param: 'messages' });
      expect(chat.body.error.details[0]).toMatchObject({ field: 'messages' });
      // A limit past the window is the limit's fault.
      const limit = await create(key, { model: 'm', input: 'hi', max_output_tokens: 10_000_000 });
      expect(limit.status).toBe(400);
      expect(limit.body.error).toMatchObject({ code: 'engine-rejected', param: 'max_output_tokens' });
    },
  );

  it.skipIf(storeCase.skip)(
    'holds metadata to OpenAI’s limits: keys of 64 characters at most, values of 512, 16 pairs',
    async () => {
      const { key } = await fleet.client();
      const ask = (metadata: Record<string, string>) =>
        fleet.kiln.call('POST', '/v1/responses', { key, body: { model: 'm', input: 'Hi.', metadata } });
      const longKey = await ask({ ['k'.repeat(65)]: 'v' });
      expect(longKey.status).toBe(400);
      expect(longKey.body.error).toMatchObject({ code: 'validation-failed', param: 'metadata' });
      expect(longKey.body.error.details).toContainEqual(
        expect.objectContaining({ field: 'metadata', limit: 64 }),
      );
      const longValue = await ask({ k: 'v'.repeat(513) });
      expect(longValue.status).toBe(400);
      expect(longValue.body.error.details).toContainEqual(
        expect.objectContaining({ field: 'metadata.k', limit: 512 }),
      );
      const many = await ask(Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])));
      expect(many.status).toBe(400);
      expect((await fleet.kiln.call('GET', '/v1/jobs', { key })).body.data).toEqual([]);
      const atLimits = { ['k'.repeat(64)]: 'v'.repeat(512) };
      const taken = await ask(atLimits);
      expect(taken.status).toBe(200);
      expect(taken.body.metadata).toEqual(atLimits);
    },
  );
});
