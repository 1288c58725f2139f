import { once } from 'node:events';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, expectEngineStopped, simPool, until } from './fleet.js';

/**
 * HTTP/1.1 pipelining: a client may send requests one after another on a connection without
 * waiting for the answers, which come back in order. A request still waiting its turn has no
 * socket of its own to close; when the connection goes, its job is cancelled all the same.
 */
describe('requests pipelined on one connection', () => {
  let kiln: TestServer;
  let sim: LlmSim;
  const MAX = 300;

  beforeAll(async () => {
    [sim] = (await simPool(1, { decodeMsPerToken: 10 })) as [LlmSim];
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', [sim]) },
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sim ? [sim] : []);
  });

  it('when the connection closes, the jobs of those still waiting their turn are cancelled too', async () => {
    const key = await kiln.key('pipelined');
    const before = sim.stats().generationTokens;
    const post = (fields: Record<string, unknown>) => {
      const body = JSON.stringify({
        model: 'm',
        max_tokens: MAX,
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
        ...fields,
      });
      return `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    };
    const socket = connect(Number(new URL(kiln.url).port), '127.0.0.1');
    socket.on('error', () => undefined).resume();
    await once(socket, 'connect');
    // The first is answered as it runs; the second and third (a sync one) wait their turn.
    socket.write(post({ stream: true }) + post({ stream: true }) + post({}));
    const jobs = async () =>
      (await kiln.call('GET', '/v1/jobs', { key })).body.data as Array<{ status: string }>;
    await until(
      async () => (await jobs()).filter((job) => job.status === 'running').length === 3,
      5000,
      'the three jobs running',
    );
    await until(() => sim.stats().generationTokens - before >= 30, 5000, 'generation under way');
    socket.destroy();
    await until(
      async () => (await jobs()).every((job) => job.status === 'cancelled'),
      5000,
      'the three jobs cancelled',
    );
    expect((await expectEngineStopped(sim)) - before).toBeLessThan(MAX);
  });
});
