import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * A runner whose HTTP answers but whose progress socket never opens: the upgrade is taken and never
 * answered (a proxy that does not pass WebSockets on, a runner stuck mid-handshake). Its jobs must
 * still end when cancelled or at the runner's timeout, and give their slot to the next job.
 */
async function hangingSockets(
  sim: ComfySim,
): Promise<{ url: string; upgrades: () => number; close(): void }> {
  const held: Duplex[] = [];
  const server: Server = createServer((req, res) => {
    const upstream = request(
      `${sim.url}${req.url}`,
      { method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  server.on('upgrade', (_req, socket) => {
    socket.on('error', () => undefined);
    held.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    upgrades: () => held.length,
    close() {
      for (const socket of held) socket.destroy();
      server.closeAllConnections();
      server.close();
    },
  };
}

describe('a runner whose progress socket never opens', () => {
  let kiln: TestServer | undefined;
  let sim: ComfySim | undefined;
  let front: Awaited<ReturnType<typeof hangingSockets>> | undefined;
  afterEach(async () => {
    await kiln?.close();
    front?.close();
    await sim?.close();
  });

  const settled = async (polling: string) => {
    for (let i = 0; i < 150; i++) {
      const { body } = await (kiln as TestServer).call('GET', polling);
      if (!['queued', 'running'].includes(body.status)) return body;
      await sleep(100);
    }
    throw new Error(`${polling} never ended`);
  };

  it.each([
    ['cancelled', undefined],
    ['past the runner’s timeout', '2s'],
  ])('a job %s ends, and the next job gets the runner’s one slot', async (how, timeout) => {
    sim = await startComfySim({ models: ['ltx-video'], stepMs: 50, steps: 4 });
    front = await hangingSockets(sim);
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: {
        gpu: { url: front.url, models: ['ltx-video'], max_concurrency: 1, timeout: timeout ?? '60s' },
      },
      'jobs.poll_interval_ms': 50,
    });
    const submit = () =>
      (kiln as TestServer).call('POST', '/v1/videos/generations', {
        body: { prompt: 'waves', duration_seconds: 1, size: '512x512' },
      });
    const first = await submit();
    expect(first.status).toBe(202);
    for (let i = 0; i < 100 && front.upgrades() === 0; i++) await sleep(20);
    expect(front.upgrades()).toBe(1);
    const second = await submit();

    const started = Date.now();
    if (how === 'cancelled')
      expect((await kiln.call('POST', `/v1/jobs/${first.body.id}/cancel`)).body.status).toBe('cancelled');
    // Else the runner's failure, not the job's own limit: `failed`, as DESIGN.md's table has it.
    else
      expect(await settled(first.body.polling_url)).toMatchObject({
        status: 'failed',
        code: 'engine-timeout',
      });
    // Well before the socket's own timeout (10 s): the run ended with its job.
    expect(Date.now() - started).toBeLessThan(8_000);
    // The slot is free: the next job reaches the runner.
    for (let i = 0; i < 100 && front.upgrades() < 2; i++) await sleep(20);
    expect(front.upgrades()).toBe(2);
    await kiln.call('POST', `/v1/jobs/${second.body.id}/cancel`);
  });
});
