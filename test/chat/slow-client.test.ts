import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, expectEngineStopped, settledJob, simPool } from './fleet.js';

/**
 * A stream's client that stops reading while its engine keeps generating: what the kernel will not
 * take waits in Kiln, up to `streams.max_unsent_bytes`, and then the connection is closed and the
 * job cancelled, as for a client that went away. Eight choices decoded a token a millisecond make
 * 8,000 events a second, about 2 MB: the socket's buffers on loopback fill within a few seconds.
 */
describe('a stream whose client stops reading', () => {
  let kiln: TestServer;
  let sim: LlmSim;
  const LIMIT = 1024 * 1024;
  const N = 8;
  const MAX_TOKENS = 8000;
  const request = (maxTokens: number) =>
    JSON.stringify({
      model: 'm',
      stream: true,
      n: N,
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: 'Tell me everything.' }],
    });

  beforeAll(async () => {
    [sim] = (await simPool(1, { decodeMsPerToken: 1 })) as [LlmSim];
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', [sim]) },
      streams: { max_unsent_bytes: LIMIT },
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sim ? [sim] : []);
  });

  /** Sends the stream request on a raw socket and answers it once the first event has arrived. */
  const openStream = async (
    key: string,
    maxTokens: number,
  ): Promise<{ socket: Socket; received: Buffer[] }> => {
    const body = request(maxTokens);
    const { hostname, port } = new URL(kiln.url);
    const socket = connect(Number(port), hostname);
    const received: Buffer[] = [];
    socket.on('data', (data: Buffer) => received.push(data));
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${hostname}:${port}\r\nauthorization: Bearer ${key}\r\n` +
        `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    const deadline = Date.now() + 10_000;
    while (!Buffer.concat(received).includes('data: {') && Date.now() < deadline) await sleep(5);
    expect(Buffer.concat(received).toString('latin1')).toMatch(/^HTTP\/1\.1 200 /);
    return { socket, received };
  };

  it('is cut off once it is more than the limit behind, and its job is cancelled', async () => {
    const key = await kiln.key(`stops-reading-${Math.random()}`);
    const before = sim.stats().generationTokens;
    const { socket, received } = await openStream(key, MAX_TOKENS);
    // The client reads nothing more.
    socket.pause();
    const job = await settledJob(kiln, key, 30_000);
    expect(job.status).toBe('cancelled');
    // The engine was stopped well short of its 64,000 tokens: the cut came while it generated.
    await expectEngineStopped(sim);
    expect(sim.stats().generationTokens - before).toBeLessThan((N * MAX_TOKENS) / 2);

    // Reading again, the client finds its stream broken off: no [DONE], no last chunk, then the close.
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.resume();
    await closed;
    const text = Buffer.concat(received).toString('utf8');
    expect(text).toContain('data: {');
    expect(text).not.toContain('data: [DONE]');
    expect(text.endsWith('\r\n0\r\n\r\n')).toBe(false);
  }, 60_000);

  it('a client that reads as it goes gets the whole stream', async () => {
    const key = await kiln.key(`keeps-reading-${Math.random()}`);
    const { socket, received } = await openStream(key, 500);
    const deadline = Date.now() + 20_000;
    while (!Buffer.concat(received).includes('data: [DONE]') && Date.now() < deadline) await sleep(10);
    socket.destroy();
    const job = await settledJob(kiln, key, 30_000);
    expect(job.status).toBe('completed');
    const text = Buffer.concat(received).toString('utf8');
    expect(text).toContain('data: [DONE]');
    // Every choice ran to its length.
    expect(text.match(/"finish_reason":"length"/g)).toHaveLength(N);
  }, 60_000);
});

/**
 * A background response's log read back (`GET /v1/responses/{id}?stream=true`) is written at the
 * client's pace, page by page, so a client slower than the store is not cut off by the limit above:
 * the log here is several times the kernel's buffers and the limit together.
 */
describe("a response's log read back by a client slower than the store", () => {
  let kiln: TestServer;
  let sim: LlmSim;
  const TOKENS = 30_000;

  beforeAll(async () => {
    [sim] = (await simPool(1, { decodeMsPerToken: 0 })) as [LlmSim];
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', [sim]) },
      streams: { max_unsent_bytes: 1024 * 1024 },
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sim ? [sim] : []);
  });

  it('gets every event, to the last, when it reads only after a pause', async () => {
    // A background streaming response, left to run to its end; its first event names it.
    const created = await fetch(`${kiln.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${kiln.adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        input: 'Tell me everything.',
        max_output_tokens: TOKENS,
        background: true,
        stream: true,
      }),
    });
    const reader = (created.body as ReadableStream<Uint8Array>).getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    const id = /"id":"(resp_[^"]+)"/.exec(first)?.[1] as string;
    expect(id).toBeDefined();
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { body } = await kiln.call('GET', `/v1/responses/${id}`);
      if (body.status !== 'in_progress' && body.status !== 'queued') break;
      if (Date.now() > deadline) throw new Error('the response did not end');
      await sleep(50);
    }

    const { hostname, port } = new URL(kiln.url);
    const socket = connect(Number(port), hostname);
    const received: Buffer[] = [];
    let reset: Error | undefined;
    socket.on('data', (data: Buffer) => received.push(data));
    socket.on('error', (error) => {
      reset = error;
    });
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(
      `GET /v1/responses/${id}?stream=true HTTP/1.1\r\nhost: ${hostname}:${port}\r\n` +
        `authorization: Bearer ${kiln.adminKey}\r\nconnection: close\r\n\r\n`,
    );
    const until = Date.now() + 10_000;
    while (received.length === 0 && !reset && Date.now() < until) await sleep(5);
    socket.pause();
    await sleep(1500);
    socket.resume();
    await closed;
    expect(reset).toBeUndefined();
    const text = Buffer.concat(received).toString('utf8');
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
    // Far more than the kernel's buffers and the limit hold together.
    expect(text.length).toBeGreaterThan(6 * 1024 * 1024);
    expect(text.match(/"type":"response\.output_text\.delta"/g)).toHaveLength(TOKENS);
    expect(text).toContain('"type":"response.incomplete"');
    // The body's last chunk: the stream ended, it was not cut.
    expect(text.endsWith('\r\n0\r\n\r\n')).toBe(true);
  }, 120_000);
});
