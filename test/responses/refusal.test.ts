import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';
import { eventsOf, valid } from './fleet.js';

/**
 * An engine's refusal and an engine's empty answer, through the Responses API. No engine Kiln
 * simulates refuses (vLLM, SGLang, llama.cpp and Ollama always answer `refusal: null`): OpenAI's
 * own API does, and so does any OpenAI-compatible proxy in front of it. So the engine here is a
 * small local upstream streaming chat chunks as OpenAI's do, a refusal in `delta.refusal`.
 */

const UP = { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1717171717, model: 'up-model' };
const event = (body: unknown) => `data: ${JSON.stringify(body)}\n\n`;
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  event({ ...UP, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
const USAGE = { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 };
const REFUSAL = ['I’m sorry, ', 'I can’t help', ' with that.'];
const REFUSED = REFUSAL.join('');

/** The chunks of the answer to `prompt`: a refusal, nothing, or text. */
function answer(prompt: string): string[] {
  const usage = event({ ...UP, choices: [], usage: USAGE });
  if (prompt === 'refuse')
    // As OpenAI streams a refusal: the role with null content, then the refusal in pieces.
    return [
      chunk({ role: 'assistant', content: null, refusal: '' }),
      ...REFUSAL.map((piece) => chunk({ refusal: piece })),
      chunk({}, 'stop'),
      usage,
    ];
  if (prompt === 'say nothing') return [chunk({ role: 'assistant', content: '' }), chunk({}, 'stop'), usage];
  return [
    chunk({ role: 'assistant', content: '' }),
    chunk({ content: 'Understood.' }),
    chunk({}, 'stop'),
    usage,
  ];
}

interface Upstream {
  url: string;
  server: Server;
  /** The messages of every chat request, in order. */
  received: Array<Array<{ role: string; content: unknown }>>;
}

async function startUpstream(): Promise<Upstream> {
  const received: Upstream['received'] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8').on('data', (piece: string) => {
      text += piece;
    });
    req.on('end', async () => {
      if (req.url !== '/v1/chat/completions') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'up-model' }] }));
        return;
      }
      const { messages } = JSON.parse(text) as { messages: Upstream['received'][number] };
      received.push(messages);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const e of [...answer(String(messages.at(-1)?.content)), 'data: [DONE]\n\n']) {
        res.write(e);
        await sleep(2);
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, received };
}

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/** The events after `response.in_progress`, each as its type and the fields that say what it carries. */
const itemEvents = (events: StreamEvent[]) =>
  events.slice(events.findIndex((e) => e.type === 'response.in_progress') + 1).map((e) => {
    const { sequence_number: _seq, item_id: _id, response: _response, ...rest } = e as Record<string, any>;
    return rest;
  });

/** The refusal's events, as OpenAI streams them: a refusal part, its `deltas` and `done` events. */
const refusalEvents = (deltas: string[]) => [
  { type: 'response.output_item.added', output_index: 0, item: expect.objectContaining({ content: [] }) },
  {
    type: 'response.content_part.added',
    output_index: 0,
    content_index: 0,
    part: { type: 'refusal', refusal: '' },
  },
  ...deltas.map((delta) => ({ type: 'response.refusal.delta', output_index: 0, content_index: 0, delta })),
  { type: 'response.refusal.done', output_index: 0, content_index: 0, refusal: REFUSED },
  {
    type: 'response.content_part.done',
    output_index: 0,
    content_index: 0,
    part: { type: 'refusal', refusal: REFUSED },
  },
  {
    type: 'response.output_item.done',
    output_index: 0,
    item: expect.objectContaining({ status: 'completed', content: [{ type: 'refusal', refusal: REFUSED }] }),
  },
  { type: 'response.completed' },
];

const refusalMessage = {
  type: 'message',
  role: 'assistant',
  status: 'completed',
  content: [{ type: 'refusal', refusal: REFUSED }],
};

/**
 * An output with its items' ids left out, what two answers of the same text share, and without the
 * `parsed: null` the client's stream helper adds to each part.
 */
const withoutIds = (output: OpenAI.Responses.ResponseOutputItem[]) =>
  output.map(({ id: _id, ...item }) =>
    item.type === 'message'
      ? {
          ...item,
          content: item.content.map((part) => {
            const { parsed: _parsed, ...rest } = part as typeof part & { parsed?: unknown };
            return rest;
          }),
        }
      : item,
  );

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(
    `an engine's refusal and empty answer as responses: ${caseTitle(storeCase)}`,
    () => {
      let kiln: TestServer;
      let upstream: Upstream;
      let client: OpenAI;

      beforeAll(async () => {
        upstream = await startUpstream();
        kiln = await startTestServer(storeCase, {
          engines: { up: { serves: 'unique', replicas: [upstream.url], models: { tm: 'up-model' } } },
          'jobs.poll_interval_ms': 50,
        });
        const key = await kiln.key('org-refusal');
        client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: key, maxRetries: 0 });
      });
      afterAll(async () => {
        await kiln?.close();
        upstream?.server.closeAllConnections();
        upstream?.server.close();
      });

      it('a sync answer is a refusal part, not in output_text; the next turn sends it as what the assistant said', async () => {
        const refused = await valid(client.responses.create({ model: 'tm', input: 'refuse' }));
        expect(refused.status).toBe('completed');
        expect(refused.output).toEqual([expect.objectContaining(refusalMessage)]);
        expect(refused.output_text).toBe('');
        expect((await valid(client.responses.retrieve(refused.id))).output).toEqual(refused.output);

        const next = await valid(
          client.responses.create({ model: 'tm', input: 'go on', previous_response_id: refused.id }),
        );
        expect(next.output_text).toBe('Understood.');
        expect(upstream.received.at(-1)).toEqual([
          { role: 'user', content: 'refuse' },
          { role: 'assistant', content: REFUSED },
          { role: 'user', content: 'go on' },
        ]);
        // The refused message, named by its id as the AI SDK names earlier answers, is taken too.
        const item = refused.output[0] as OpenAI.Responses.ResponseOutputMessage;
        await valid(
          client.responses.create({
            model: 'tm',
            input: [
              { type: 'item_reference', id: item.id },
              { role: 'user', content: 'go on' },
            ],
          }),
        );
        expect(upstream.received.at(-1)?.at(-2)).toEqual({ role: 'assistant', content: REFUSED });
      });

      it('a stream carries the refusal part, its deltas and done events, and the client’s final response has it', async () => {
        const events = await eventsOf(
          await client.responses.create({ model: 'tm', input: 'refuse', stream: true }),
        );
        expect(itemEvents(events)).toEqual(refusalEvents(REFUSAL));
        const last = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
        expect(last.response.output).toEqual([expect.objectContaining(refusalMessage)]);
        expect(last.response.output_text).toBe('');
        expect((await client.responses.retrieve(last.response.id)).output).toEqual(last.response.output);

        // The official client's stream helper builds its response from the events.
        const helper = client.responses.stream({ model: 'tm', input: 'refuse' });
        const refusalDone = new Promise<string>((resolve) =>
          helper.on('response.refusal.done', (e) => resolve(e.refusal)),
        );
        const final = await helper.finalResponse();
        expect(await refusalDone).toBe(REFUSED);
        expect(withoutIds(final.output)).toEqual([refusalMessage]);
        expect(final.output_text).toBe('');
      });

      it('a background response keeps the refusal, polled and streamed again from its log', async () => {
        const queued = await client.responses.create({ model: 'tm', input: 'refuse', background: true });
        await until(
          async () => (await client.responses.retrieve(queued.id)).status === 'completed',
          5000,
          'the background response to complete',
        );
        const polled = await valid(client.responses.retrieve(queued.id));
        expect(polled.output).toEqual([expect.objectContaining(refusalMessage)]);
        expect(polled.output_text).toBe('');

        const streamed = await client.responses.create({
          model: 'tm',
          input: 'refuse',
          background: true,
          stream: true,
        });
        const live = await eventsOf(streamed);
        const id = (live.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response.id;
        const resumed = await eventsOf(await client.responses.retrieve(id, { stream: true }));
        expect(itemEvents(resumed)).toEqual(refusalEvents(REFUSAL));
        expect(resumed).toEqual(live);
      });

      it('a stream retried with its Idempotency-Key replays the refusal as one delta', async () => {
        const body = { model: 'tm', input: 'refuse', stream: true as const };
        const headers = { 'Idempotency-Key': `refuse-${Math.random().toString(36).slice(2)}` };
        const first = await eventsOf(await client.responses.create(body, { headers }));
        const again = await eventsOf(await client.responses.create(body, { headers }));
        expect(itemEvents(again)).toEqual(refusalEvents([REFUSED]));
        // The same response, numbered after fewer deltas.
        expect(again.at(-1)).toEqual({ ...first.at(-1), sequence_number: again.length - 1 });
      });

      it('an empty answer is one message of empty text, sync and streamed alike', async () => {
        const sync = await valid(client.responses.create({ model: 'tm', input: 'say nothing' }));
        const events = await eventsOf(
          await client.responses.create({ model: 'tm', input: 'say nothing', stream: true }),
        );
        const streamed = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
        const empty = { type: 'output_text', text: '', annotations: [], logprobs: [] };
        expect(withoutIds(sync.output)).toEqual([
          { type: 'message', role: 'assistant', status: 'completed', content: [empty] },
        ]);
        expect(withoutIds(streamed.output)).toEqual(withoutIds(sync.output));
        expect(sync.output_text).toBe('');
        expect(streamed.output_text).toBe('');
        // The message's events, with no delta: its text is empty.
        expect(itemEvents(events).map((e) => e.type)).toEqual([
          'response.output_item.added',
          'response.content_part.added',
          'response.output_text.done',
          'response.content_part.done',
          'response.output_item.done',
          'response.completed',
        ]);
        // The official client's stream helper sees the same message.
        const final = await client.responses.stream({ model: 'tm', input: 'say nothing' }).finalResponse();
        expect(withoutIds(final.output)).toEqual(withoutIds(sync.output));
        // And so does its replay to a retry with the same Idempotency-Key.
        const body = { model: 'tm', input: 'say nothing', stream: true as const };
        const headers = { 'Idempotency-Key': `empty-${Math.random().toString(36).slice(2)}` };
        const first = await eventsOf(await client.responses.create(body, { headers }));
        const again = await eventsOf(await client.responses.create(body, { headers }));
        expect(itemEvents(again)).toEqual(itemEvents(first));
      });
    },
  );
}
