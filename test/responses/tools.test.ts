import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeCases } from '../helpers/stores.js';
import { eventsOf, type ResponsesFleet, startResponsesFleet, valid } from './fleet.js';

/**
 * Function tools through the Responses API, with the openai client. The simulated model calls a
 * tool when the user's last message names it, filling the required string arguments with the
 * message's proper noun; given the tool's output, it answers in one sentence.
 */

const weather: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const question = 'What is the weather in Lyon? Ask get_weather.';

/** Prompt tokens the replica counts for these chat messages, by its own /tokenize. */
async function promptTokens(sim: { url: string }, messages: unknown[]): Promise<number> {
  const answer = await fetch(`${sim.url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages }),
  });
  expect(answer.status).toBe(200);
  return ((await answer.json()) as { count: number }).count;
}

/** The chat messages a function call and its output become for the engine. */
const callAnswered = (call: OpenAI.Responses.ResponseFunctionToolCall, output: string) => [
  {
    role: 'assistant',
    content: null,
    tool_calls: [
      { id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } },
    ],
  },
  { role: 'tool', tool_call_id: call.call_id, content: output },
];

describe.each(storeCases)('function tools through the Responses API ($name)', (storeCase) => {
  let fleet: ResponsesFleet;
  let client: OpenAI;

  beforeAll(async () => {
    if (storeCase.skip) return;
    fleet = await startResponsesFleet(storeCase);
    ({ client } = await fleet.client());
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it.skipIf(storeCase.skip)(
    'a function_call item, then its output through previous_response_id, then the answer',
    async () => {
      const asked = await valid(client.responses.create({ model: 'm', input: question, tools: [weather] }));
      expect(asked.status).toBe('completed');
      expect(asked.output.map((item) => item.type)).toEqual(['function_call']);
      const call = asked.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
      expect(call).toMatchObject({ name: 'get_weather', status: 'completed', call_id: expect.any(String) });
      expect(call.id).toMatch(/^fc_/);
      expect(JSON.parse(call.arguments)).toEqual({ city: 'Lyon' });
      expect(asked.output_text).toBe('');

      const answered = await valid(
        client.responses.create({
          model: 'm',
          previous_response_id: asked.id,
          tools: [weather],
          input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
        }),
      );
      expect(answered.status).toBe('completed');
      expect(answered.output.map((item) => item.type)).toEqual(['message']);
      expect(answered.output_text).toMatch(/^\w.*\.$/);
      // The engine was sent the question, the call as it was made, and its output under its call_id.
      expect(answered.usage?.input_tokens).toBe(
        await promptTokens(fleet.quick, [
          { role: 'user', content: question },
          ...callAnswered(call, '{"temp":21}'),
        ]),
      );
    },
  );

  it.skipIf(storeCase.skip)(
    'streamed, the call comes as function_call_arguments deltas that join to its arguments',
    async () => {
      const events = await eventsOf(
        await client.responses.create({ model: 'm', input: question, tools: [weather], stream: true }),
      );
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta');
      expect(deltas.length).toBeGreaterThan(1);
      expect(events.map((e) => e.type)).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        ...deltas.map(() => 'response.function_call_arguments.delta'),
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.completed',
      ]);
      const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
      const call = completed.response.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
      expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
      const args = deltas.map((e) => e.delta).join('');
      expect(args).toBe(call.arguments);
      expect(JSON.parse(args)).toEqual({ city: 'Lyon' });
      expect(events.find((e) => e.type === 'response.output_item.added')).toMatchObject({
        item: {
          type: 'function_call',
          id: call.id,
          call_id: call.call_id,
          name: 'get_weather',
          arguments: '',
        },
      });
      expect(events.find((e) => e.type === 'response.function_call_arguments.done')).toMatchObject({
        item_id: call.id,
        name: 'get_weather',
        arguments: args,
      });
      for (const e of deltas) expect(e.item_id).toBe(call.id);
      expect(events.find((e) => e.type === 'response.output_item.done')).toMatchObject({ item: call });
      expect(await valid(client.responses.retrieve(completed.response.id))).toEqual(completed.response);
    },
  );

  it.skipIf(storeCase.skip)(
    'a function’s output as text parts reaches the engine as its text; image or file parts, a stray call_id, or no parts at all are 400',
    async () => {
      const { client: own, key } = await fleet.client();
      const asked = await valid(own.responses.create({ model: 'm', input: question, tools: [weather] }));
      const call = asked.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
      const post = (body: Record<string, unknown>) =>
        fleet.kiln.call('POST', '/v1/responses', { key, body: { model: 'm', tools: [weather], ...body } });
      // The call by its item id alone, without a type (OpenAI's item reference), then its output in parts.
      const parts = [
        { type: 'input_text', text: '{"temp":' },
        { type: 'input_text', text: '21}' },
      ];
      const answered = await post({
        input: [{ id: call.id }, { type: 'function_call_output', call_id: call.call_id, output: parts }],
      });
      expect(answered.status, JSON.stringify(answered.body)).toBe(200);
      // The question was not sent this time: the engine got the call and the parts' text as one output.
      expect(answered.body.usage.input_tokens).toBe(
        await promptTokens(fleet.quick, [...callAnswered(call, '{"temp":21}')]),
      );

      const refused = async (output: unknown, call_id = call.call_id) => {
        const answer = await post({
          previous_response_id: asked.id,
          input: [{ type: 'function_call_output', call_id, output }],
        });
        expect(answer.status, JSON.stringify(answer.body)).toBe(400);
        return answer.body.error.details;
      };
      expect(
        await refused([
          { type: 'input_text', text: 'see' },
          { type: 'input_image', image_url: 'https://example.com/x.png' },
        ]),
      ).toEqual([expect.objectContaining({ field: 'input[0].output[1].type', rule: 'unsupported' })]);
      expect(await refused([{ type: 'input_file', file_id: 'file-1' }])).toEqual([
        expect.objectContaining({ field: 'input[0].output[0].type', rule: 'unsupported' }),
      ]);
      expect(await refused([1, 2])).toEqual([
        expect.objectContaining({ field: 'input[0].output[0].type', rule: 'enum' }),
        expect.objectContaining({ field: 'input[0].output[1].type', rule: 'enum' }),
      ]);
      expect(await refused('{"temp":21}', 'call_nope')).toEqual([
        expect.objectContaining({ field: 'input[0].call_id', rule: 'exists', received: 'call_nope' }),
      ]);

      // A turn that continues a response may send no input at all, as OpenAI's API allows.
      const again = await post({ previous_response_id: answered.body.id });
      expect(again.status, JSON.stringify(again.body)).toBe(200);
      expect(again.body).toMatchObject({ previous_response_id: answered.body.id, object: 'response' });
      expect(again.body.output.length).toBeGreaterThan(0);
      expect((await post({})).body.error.details).toEqual([
        expect.objectContaining({ field: 'input', rule: 'minItems' }),
      ]);
    },
  );
});
