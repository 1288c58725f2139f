import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * What OpenAI-compatible engines, and proxies in front of them, really send besides the plain
 * stream: keep-alive events with empty data, a usage chunk without `choices`, a whole JSON answer to
 * a request that asked for a stream, a clean stream whose choice never got a finish reason. A caller
 * still gets the answer, streamed or not. And two streams pipelined on one HTTP/1.1 connection each
 * get all of theirs.
 */

const UP = { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1717171717, model: 'up-model' };
const PIECES = ['Hel', 'lo', ' there'];
const event = (body: unknown) => `data: ${JSON.stringify(body)}\n\n`;
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  event({ ...UP, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
const USAGE = { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 };
const CALL = {
  id: 'call_1',
  type: 'function',
  function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
};

const PARALLEL = ['hello.py', 'world.py', 'again.py'].map((path, i) => ({
  id: `call_${i}`,
  type: 'function',
  function: { name: 'file_write', arguments: JSON.stringify({ filePath: path }) },
}));

/** The engine's answer, chosen by the request's last message. */
function answer(quirk: string): { json?: unknown; events?: string[] } {
  const opening = chunk({ role: 'assistant', content: '' });
  const contents = PIECES.map((content) => chunk({ content }));
  const finish = chunk({}, 'stop');
  switch (quirk) {
    case 'keep-alive':
      // A proxy's keep-alives: an event with empty data, and one with a lone space.
      return {
        events: [
          opening,
          'data:\n\n',
          ...contents,
          'data: \n\n',
          finish,
          event({ ...UP, choices: [], usage: USAGE }),
        ],
      };
    case 'no-choices':
      return { events: [opening, ...contents, finish, event({ ...UP, usage: USAGE })] };
    case 'whole':
      return {
        json: {
          ...UP,
          object: 'chat.completion',
          system_fingerprint: 'fp-up',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: PIECES.join('') },
              logprobs: null,
              finish_reason: 'stop',
            },
          ],
          usage: USAGE,
        },
      };
    case 'whole-tools':
      return {
        json: {
          ...UP,
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: null, tool_calls: [CALL] },
              logprobs: null,
              finish_reason: 'tool_calls',
            },
          ],
          usage: USAGE,
        },
      };
    case 'whole-no-finish':
    case 'whole-tools-no-finish': {
      // A whole answer whose choice has no finish reason.
      const tools = quirk === 'whole-tools-no-finish';
      const message = tools
        ? { role: 'assistant', content: null, tool_calls: [CALL] }
        : { role: 'assistant', content: PIECES.join('') };
      return {
        json: { ...UP, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: null }] },
      };
    }
    case 'parallel-zero':
      // Ollama's parallel calls (ollama/ollama#15457): each whole, its own id, every one at index 0.
      return {
        events: [
          opening,
          ...PARALLEL.map(({ id, type, function: fn }) =>
            chunk({ tool_calls: [{ index: 0, id, type, function: fn }] }),
          ),
          chunk({}, 'tool_calls'),
          event({ ...UP, choices: [], usage: USAGE }),
        ],
      };
    case 'no-finish':
      // Content, the usage chunk and [DONE], but no chunk with a finish reason.
      return { events: [opening, ...contents, event({ ...UP, choices: [], usage: USAGE })] };
    case 'no-finish-tools':
      return {
        events: [
          chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, ...CALL }] }),
          event({ ...UP, choices: [], usage: USAGE }),
        ],
      };
    default:
      return { events: [opening, ...contents, finish, event({ ...UP, choices: [], usage: USAGE })] };
  }
}

async function startEngine(): Promise<{ url: string; server: Server }> {
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
      const body = JSON.parse(text) as { messages: Array<{ content: string }> };
      const { json, events } = answer(body.messages.at(-1)?.content ?? '');
      if (json) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(json));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const e of [...(events ?? []), 'data: [DONE]\n\n']) {
        res.write(e);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`engine quirks a caller never sees: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let engine: { url: string; server: Server };
    let client: OpenAI;

    beforeAll(async () => {
      engine = await startEngine();
      kiln = await startTestServer(storeCase, {
        engines: { up: { serves: 'unique', replicas: [engine.url], models: { tm: 'up-model' } } },
      });
      client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
    });
    afterAll(async () => {
      await kiln?.close();
      engine?.server.closeAllConnections();
      engine?.server.close();
    });

    const streamed = async (quirk: string) => {
      const stream = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: quirk }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let content = '';
      let finish: string | null | undefined;
      let usage: unknown;
      for await (const part of stream) {
        expect(part.id).toMatch(/^chatcmpl-[0-9a-f-]{36}$/);
        expect(Array.isArray(part.choices)).toBe(true);
        content += part.choices[0]?.delta.content ?? '';
        finish ??= part.choices[0]?.finish_reason;
        usage ??= part.usage ?? undefined;
      }
      return { content, finish, usage };
    };

    it.each(['keep-alive', 'no-choices', 'whole'])(
      '%s: the stream carries the whole answer and its usage, and so does the sync answer',
      async (quirk) => {
        expect(await streamed(quirk)).toEqual({ content: PIECES.join(''), finish: 'stop', usage: USAGE });
        const whole = await client.chat.completions.create({
          model: 'tm',
          messages: [{ role: 'user', content: quirk }],
        });
        expect(whole.choices[0]?.message.content).toBe(PIECES.join(''));
        expect(whole.usage).toMatchObject(USAGE);
      },
    );

    it('a whole answer to a stream keeps its tool calls, numbered as streamed ones are', async () => {
      // Through the official client's stream helper, which rebuilds the message from the deltas.
      const stream = client.chat.completions.stream({
        model: 'tm',
        messages: [{ role: 'user', content: 'whole-tools' }],
      });
      const final = await stream.finalChatCompletion();
      expect(final.choices[0]?.finish_reason).toBe('tool_calls');
      expect(final.choices[0]?.message.tool_calls).toEqual([CALL]);
    });

    it('parallel tool calls an engine numbered all 0 reach a stream numbered 0, 1, 2, and a response as three', async () => {
      // The official client's stream helper joins deltas by index: numbered as the engine sent
      // them, the three calls would be one, its arguments three JSON texts run together.
      const helper = client.chat.completions.stream({
        model: 'tm',
        messages: [{ role: 'user', content: 'parallel-zero' }],
      });
      const final = await helper.finalChatCompletion();
      expect(final.choices[0]?.finish_reason).toBe('tool_calls');
      expect(final.choices[0]?.message.tool_calls).toEqual(PARALLEL);
      const stream = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'parallel-zero' }],
        stream: true,
      });
      const indices: Array<[number, string | undefined]> = [];
      for await (const part of stream)
        for (const call of part.choices[0]?.delta.tool_calls ?? []) indices.push([call.index, call.id]);
      expect(indices).toEqual(PARALLEL.map(({ id }, i) => [i, id]));
      // The sync answer, folded from the same stream, has the same three calls.
      const whole = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'parallel-zero' }],
      });
      expect(whole.choices[0]?.message.tool_calls).toEqual(PARALLEL);
      // And a response, streamed or not, has three function_call items.
      const calls = (output: OpenAI.Responses.ResponseOutputItem[]) =>
        output.map((item) =>
          item.type === 'function_call' ? [item.call_id, item.name, item.arguments] : item.type,
        );
      const expected = PARALLEL.map(({ id, function: fn }) => [id, fn.name, fn.arguments]);
      const response = await client.responses.create({ model: 'tm', input: 'parallel-zero' });
      expect(calls(response.output)).toEqual(expected);
      const events = client.responses.stream({ model: 'tm', input: 'parallel-zero' });
      expect(calls((await events.finalResponse()).output)).toEqual(expected);
    });

    it('a clean stream whose choice never got a finish reason ends with "stop", as the openai client needs', async () => {
      // The official client's stream helper throws on a choice without a finish reason.
      const helper = client.chat.completions.stream({
        model: 'tm',
        messages: [{ role: 'user', content: 'no-finish' }],
        stream_options: { include_usage: true },
      });
      const final = await helper.finalChatCompletion();
      expect(final.choices[0]?.finish_reason).toBe('stop');
      expect(final.choices[0]?.message.content).toBe(PIECES.join(''));
      expect(final.usage).toMatchObject(USAGE);
      // On the wire: one closing chunk, its delta empty, with the stream's id, model and created,
      // before the usage chunk.
      const stream = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'no-finish' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      const parts: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
      for await (const part of stream) parts.push(part);
      const [first] = parts;
      const closing = parts.filter((p) => p.choices.some((c) => c.finish_reason));
      expect(closing).toHaveLength(1);
      expect(closing[0]).toMatchObject({
        id: first?.id,
        model: 'tm',
        created: first?.created,
        choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
      });
      expect(parts.indexOf(closing[0] as never)).toBe(parts.length - 2);
      expect(parts.at(-1)?.usage).toMatchObject(USAGE);
      // A stream without usage gets the closing chunk last.
      const plain = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'no-finish' }],
        stream: true,
      });
      const reasons: Array<string | null | undefined> = [];
      for await (const part of plain) reasons.push(part.choices[0]?.finish_reason);
      expect(reasons.at(-1)).toBe('stop');
      // The sync answer and an async job's result, folded from the same stream, say so too.
      const whole = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'no-finish' }],
      });
      expect(whole.choices[0]?.finish_reason).toBe('stop');
      const job = await fetch(`${kiln.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${kiln.adminKey}`,
          'content-type': 'application/json',
          prefer: 'wait=30',
        },
        body: JSON.stringify({
          model: 'tm',
          mode: 'async',
          messages: [{ role: 'user', content: 'no-finish' }],
        }),
      });
      expect(job.status).toBe(200);
      const polled = (await job.json()) as { status: string; result: OpenAI.Chat.ChatCompletion };
      expect(polled.status).toBe('completed');
      expect(polled.result.choices[0]?.finish_reason).toBe('stop');
    });

    it.each([
      ['whole-no-finish', 'stop'],
      ['whole-tools-no-finish', 'tool_calls'],
    ])('a whole answer to a stream, %s, is finished with "%s" too', async (quirk, reason) => {
      const helper = client.chat.completions.stream({
        model: 'tm',
        messages: [{ role: 'user', content: quirk }],
      });
      expect((await helper.finalChatCompletion()).choices[0]?.finish_reason).toBe(reason);
      const whole = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: quirk }],
      });
      expect(whole.choices[0]?.finish_reason).toBe(reason);
    });

    it('a clean stream of tool calls that never got a finish reason ends with "tool_calls"', async () => {
      const helper = client.chat.completions.stream({
        model: 'tm',
        messages: [{ role: 'user', content: 'no-finish-tools' }],
      });
      const final = await helper.finalChatCompletion();
      expect(final.choices[0]?.finish_reason).toBe('tool_calls');
      expect(final.choices[0]?.message.tool_calls).toEqual([CALL]);
    });

    it('two streams pipelined on one HTTP/1.1 connection each get all of their events', async () => {
      const { hostname, port } = new URL(kiln.url);
      const body = JSON.stringify({
        model: 'tm',
        messages: [{ role: 'user', content: 'plain' }],
        stream: true,
      });
      const request = (close: boolean) =>
        `POST /v1/chat/completions HTTP/1.1\r\nhost: ${hostname}\r\nauthorization: Bearer ${kiln.adminKey}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `${close ? 'connection: close\r\n' : ''}\r\n${body}`;
      const socket = connect(Number(port), hostname);
      socket.write(request(false) + request(true));
      const parts: Buffer[] = [];
      for await (const part of socket) parts.push(part as Buffer);
      const answers = Buffer.concat(parts)
        .toString('utf8')
        .split(/(?=HTTP\/1\.1 )/);
      expect(answers).toHaveLength(2);
      for (const text of answers) {
        expect(text).toMatch(/^HTTP\/1\.1 200 /);
        const contents = [...text.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1]);
        expect(contents.join('')).toBe(PIECES.join(''));
        expect(text).toContain('data: [DONE]');
      }
    });
  });
}
