import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * A webhook retried long after its job ended carries file URLs signed for that attempt: the URL
 * stored with the delivery expires `files.url_ttl` after the job's end, and retries go on for hours.
 */
describe('a media job’s webhook, retried', () => {
  let kiln: TestServer;
  let sim: ComfySim;
  const calls: Array<{ signature: string; body: string }> = [];
  // The first attempt fails; the next is taken.
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      calls.push({ signature: String(req.headers['x-service-signature']), body });
      res.writeHead(calls.length === 1 ? 503 : 200).end();
    });
  });

  beforeAll(async () => {
    sim = await startComfySim({ models: ['sdxl'], stepMs: 5, steps: 2 });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: { gpu: { url: sim.url, models: ['sdxl'] } },
      'security.allow_hosts': ['127.0.0.1'],
      'webhooks.retry_schedule': ['2100ms'],
      'webhooks.jitter': 0,
      'jobs.poll_interval_ms': 100,
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await sim?.close();
    receiver.closeAllConnections();
    receiver.close();
  });

  it('carries a URL signed afresh, valid and later-expiring, in a body its signature covers', async () => {
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const submitted = await kiln.call('POST', '/v1/images/generations', {
      body: {
        prompt: 'a kiln',
        size: '512x512',
        mode: 'async',
        webhook: { url: hook, secret: 'hook-secret' },
      },
    });
    expect(submitted.status).toBe(202);
    for (let i = 0; i < 150 && calls.length < 2; i++) await sleep(50);
    expect(calls).toHaveLength(2);

    const urls = calls.map((call) => new URL(JSON.parse(call.body).result.data[0].url));
    const expires = urls.map((url) => Number(url.searchParams.get('expires')));
    expect(expires[1]).toBeGreaterThanOrEqual((expires[0] as number) + 2);
    expect(urls[1]?.searchParams.get('signature')).not.toBe(urls[0]?.searchParams.get('signature'));
    // Without keep-alive: a connection the test leaves idle would hold the server's close.
    const image = await fetch(urls[1] as URL, { dispatcher: new Agent({ pipelining: 0 }) });
    expect(image.status).toBe(200);
    expect((await image.arrayBuffer()).byteLength).toBeGreaterThan(0);
    // Only the URL's signature and expiry changed, and the signature header covers the body sent.
    const { result: _first, ...rest0 } = JSON.parse(calls[0]?.body as string);
    const { result: _second, ...rest1 } = JSON.parse(calls[1]?.body as string);
    expect(rest1).toEqual(rest0);
    const [, t, v1] = /t=(\d+),v1=([0-9a-f]+)/.exec(calls[1]?.signature as string) ?? [];
    expect(v1).toBe(createHmac('sha256', 'hook-secret').update(`${t}.${calls[1]?.body}`).digest('hex'));
  });
});
