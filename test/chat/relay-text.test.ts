import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Whatever the text, a relayed stream carries it byte for byte: non-ASCII and escaped content,
 * a character split between two of the engine's writes, several events in one write. Most content
 * chunks take the reader that skips JSON.parse and the writer's framing by byte count, so a
 * mistake in either shows here as a wrong text or a broken stream.
 */

const PIECES = [
  'Grüße',
  ' 🔥',
  ' 日本語',
  ' "quoted"',
  ' back\\slash',
  ' tab\there',
  ' line\nbreak',
  ' é',
  ' plain',
  ' end',
];

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({
    id: 'chatcmpl-up',
    object: 'chat.completion.chunk',
    created: 1717171717,
    model: 'up-model',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })}\n\n`;

/** Writes the stream in pieces: one event at a time, two at once, and one cut inside a character. */
async function startEngine(): Promise<{ url: string; server: Server }> {
  const events = [
    chunk({ role: 'assistant', content: '' }),
    ...PIECES.map((content) => chunk({ content })),
    chunk({}, 'stop'),
    `data: ${JSON.stringify({ id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1717171717, model: 'up-model', choices: [], usage: { prompt_tokens: 3, completion_tokens: PIECES.length, total_tokens: 3 + PIECES.length } })}\n\n`,
    'data: [DONE]\n\n',
  ].map((event) => Buffer.from(event));
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      if (req.url !== '/v1/chat/completions') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          req.url === '/v1/models' ? JSON.stringify({ object: 'list', data: [{ id: 'up-model' }] }) : '{}',
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const pause = () => new Promise((resolve) => setTimeout(resolve, 2));
      for (const [i, event] of events.entries()) {
        if (i === 2) {
          // The emoji's four bytes split two and two across the writes.
          const cut = event.indexOf(Buffer.from('🔥')) + 2;
          res.write(event.subarray(0, cut));
          await pause();
          res.write(event.subarray(cut));
        } else if (i === 4) {
          res.write(Buffer.concat([event, events[5] as Buffer]));
        } else if (i !== 5) res.write(event);
        await pause();
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** The whole answer to a streamed chat request sent over a bare socket, read until the server closes it. */
async function rawStream(url: string, key: string, version: '1.0' | '1.1'): Promise<Buffer> {
  const { hostname, port } = new URL(url);
  const body = JSON.stringify({
    model: 'tm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const socket = connect(Number(port), hostname);
  // Written, not ended: a half-closed connection may be dropped before its answer. `connection:
  // close` (and HTTP/1.0) has the server close it once the answer is complete.
  socket.write(
    `POST /v1/chat/completions HTTP/${version}\r\nhost: ${hostname}\r\nauthorization: Bearer ${key}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  const parts: Buffer[] = [];
  for await (const part of socket) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/** An HTTP/1.1 chunked body undone, failing on any chunk whose size line does not match its bytes. */
function unchunk(body: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = body.indexOf('\r\n', at);
    const size = Number.parseInt(body.subarray(at, eol).toString('latin1'), 16);
    expect(Number.isNaN(size)).toBe(false);
    const data = body.subarray(eol + 2, eol + 2 + size);
    expect(body.subarray(eol + 2 + size, eol + 4 + size).toString('latin1')).toBe('\r\n');
    at = eol + 4 + size;
    if (size === 0) break;
    out.push(data);
  }
  expect(at).toBe(body.length);
  return Buffer.concat(out);
}

/** The content pieces of a stream's `data:` events, which must end with `[DONE]`. */
function piecesOf(events: string): string[] {
  const data = events
    .split('\n\n')
    .filter(Boolean)
    .map((event) => event.replace(/^data: /, ''));
  expect(data.at(-1)).toBe('[DONE]');
  return data
    .slice(0, -1)
    .map((text) => (JSON.parse(text) as { choices: Array<{ delta?: { content?: string } }> }).choices[0])
    .map((choice) => choice?.delta?.content ?? '')
    .filter(Boolean);
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a relayed stream's text, byte for byte: ${caseTitle(storeCase)}`, () => {
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

    it('the official client gets every piece as the engine wrote it, renamed, and the same text unstreamed', async () => {
      const stream = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      const contents: string[] = [];
      let usage: unknown;
      for await (const part of stream) {
        expect(part.id).toMatch(/^chatcmpl-[0-9a-f-]{36}$/);
        expect(part.model).toBe('tm');
        const content = part.choices[0]?.delta.content;
        if (content) contents.push(content);
        usage ??= part.usage ?? undefined;
      }
      expect(contents).toEqual(PIECES);
      expect(usage).toMatchObject({ completion_tokens: PIECES.length });

      const whole = await client.chat.completions.create({
        model: 'tm',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(whole.choices[0]?.message.content).toBe(PIECES.join(''));
    });

    it('an HTTP/1.1 stream is well-formed chunked encoding to its last byte and honours connection: close; an HTTP/1.0 one is the bare events', async () => {
      const chunked = await rawStream(kiln.url, kiln.adminKey, '1.1');
      const split = chunked.indexOf('\r\n\r\n');
      const chunkedHead = chunked.subarray(0, split).toString('latin1');
      expect(chunkedHead).toMatch(/\r\ntransfer-encoding: chunked/i);
      // The client asked for `connection: close`: it is told so, and the connection ends with the stream.
      expect(chunkedHead).toMatch(/\r\nconnection: close\r\n/i);
      expect(piecesOf(unchunk(chunked.subarray(split + 4)).toString('utf8'))).toEqual(PIECES);

      const plain = await rawStream(kiln.url, kiln.adminKey, '1.0');
      const head = plain.subarray(0, plain.indexOf('\r\n\r\n')).toString('latin1');
      expect(head).toMatch(/^HTTP\/1\.1 200 /);
      expect(head).not.toMatch(/transfer-encoding/i);
      expect(piecesOf(plain.subarray(plain.indexOf('\r\n\r\n') + 4).toString('utf8'))).toEqual(PIECES);
    });
  });
}
