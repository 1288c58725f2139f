import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool, until } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** An HTTP/1.1 request on a kept-alive connection, as a client's pool sends it. */
function request(port: number, key: string, body: unknown): string {
  const json = JSON.stringify(body);
  return [
    'POST /v1/chat/completions HTTP/1.1',
    `Host: 127.0.0.1:${port}`,
    `Authorization: Bearer ${key}`,
    'Content-Type: application/json',
    `Content-Length: ${Buffer.byteLength(json)}`,
    '',
    json,
  ].join('\r\n');
}

/**
 * A gateway told to stop (SIGTERM runs the same close) refuses a request that still arrives on a
 * connection opened before: in Kiln's error envelope, with `Retry-After`, the connection closed,
 * and nothing sent to an engine; the stream in flight on that connection is answered in full.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(
    `a request arriving while the gateway drains: ${caseTitle(storeCase)}`,
    () => {
      let kiln: TestServer | undefined;
      let sims: LlmSim[] = [];

      beforeAll(async () => {
        // 40 tokens at 10 ms: a stream of about 400 ms, in flight while the gateway starts closing.
        sims = await simPool(1, { decodeMsPerToken: 10 });
        kiln = await startTestServer(storeCase, { engines: { pool: engine('unique', sims) } });
      });
      afterAll(async () => {
        await kiln?.close();
        await closeAll(sims);
      });

      it('is answered 503 shutting-down with Retry-After after the stream ahead of it, and reaches no engine', async () => {
        const server = kiln as TestServer;
        kiln = undefined; // closed by the test itself
        const port = Number(new URL(server.url).port);
        const key = await server.key('drain-refusal');
        const socket = connect(port, '127.0.0.1');
        let received = '';
        socket.setEncoding('utf8').on('data', (text: string) => {
          received += text;
        });
        const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));

        socket.write(
          request(port, key, {
            model: 'm',
            stream: true,
            max_tokens: 40,
            messages: [{ role: 'user', content: 'a stream in flight' }],
          }),
        );
        await until(() => received.includes('data: {'), 5000, 'the stream’s first chunk');
        const closed = server.close();
        // Once the gateway no longer listens, its drain has begun; the next request rides the open socket.
        await until(() => !server.server.app.server.listening, 5000, 'the gateway to stop listening');
        socket.write(request(port, key, { model: 'm', messages: [{ role: 'user', content: 'too late' }] }));
        await ended;
        await closed;

        const refusalAt = received.indexOf('HTTP/1.1 503');
        expect(received.startsWith('HTTP/1.1 200')).toBe(true);
        expect(refusalAt).toBeGreaterThan(received.indexOf('data: [DONE]'));
        expect(received.indexOf('data: [DONE]')).toBeGreaterThan(0);
        const [head = '', body = ''] = received.slice(refusalAt).split('\r\n\r\n');
        const headers = head.toLowerCase().split('\r\n');
        expect(headers).toContain('retry-after: 1');
        expect(headers).toContain('connection: close');
        expect(JSON.parse(body)).toEqual({
          error: {
            type: 'server_error',
            code: 'shutting-down',
            message: expect.stringContaining('shutting down'),
            param: null,
          },
        });
        expect(sims[0]?.stats().requests).toBe(1);
      });

      it('a kept-alive connection whose answer ends after the close began does not hold the close', async () => {
        const server = await startTestServer(storeCase, { engines: { pool: engine('unique', sims) } });
        const port = Number(new URL(server.url).port);
        const key = await server.key('drain-idle');
        const socket = connect(port, '127.0.0.1');
        let received = '';
        socket.setEncoding('utf8').on('data', (text: string) => {
          received += text;
        });
        // A sync answer of about 400 ms, still running when the close begins; the client then keeps
        // its connection open, as a pool does, and sends nothing more.
        socket.write(
          request(port, key, { model: 'm', max_tokens: 40, messages: [{ role: 'user', content: 'hi' }] }),
        );
        await until(() => sims[0]?.stats().running === 1, 5000, 'the answer under way');
        const closed = server.close();
        await until(() => received.includes('"chat.completion"'), 5000, 'the answer');
        const answeredAt = Date.now();
        await closed;
        // Not the keep-alive timeout nor the shutdown grace (30 s): the connection went idle and was closed.
        expect(Date.now() - answeredAt).toBeLessThan(3000);
        expect(received.startsWith('HTTP/1.1 200')).toBe(true);
        socket.destroy();
      });
    },
  );
}
