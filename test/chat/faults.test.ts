import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { sample } from '../helpers/scrape.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

/** Overflow, queueing and engine faults, each on a fleet of its own. */
describe('chat under load and faults', () => {
  let kiln: TestServer | undefined;
  let sims: LlmSim[] = [];

  const start = async (overrides: Record<string, unknown>) => {
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      'jobs.workers': 32,
      ...overrides,
    });
    return kiln;
  };
  const chat = (server: TestServer, body: Record<string, unknown> = {}) =>
    server.call('POST', '/v1/chat/completions', {
      body: {
        model: 'm',
        messages: [{ role: 'user', content: `q ${Math.random()}` }],
        max_tokens: 20,
        ...body,
      },
    });

  afterEach(async () => {
    await kiln?.close();
    await closeAll(sims);
    kiln = undefined;
    sims = [];
  });

  it('overflow takes only the excess once the local fleet is full, and nothing when it is not', async () => {
    const local = await simPool(1, { decodeMsPerToken: 20 });
    const cloud = await simPool(1, { decodeMsPerToken: 1 });
    sims = [...local, ...cloud];
    const server = await start({
      engines: {
        local: engine('unique', local, { max_concurrency: 2 }),
        cloud: engine('unique', cloud, { overflow: true }),
      },
      'routing.overflow_after_ms': 100,
    });
    const alone = await chat(server);
    expect(alone.headers.get('x-kiln-route')).toMatch(/engine=local; replica=0; overflow=false/);
    expect(cloud[0]?.stats().requests).toBe(0);

    const answers = await Promise.all(Array.from({ length: 6 }, () => chat(server)));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const routes = answers.map((a) => a.headers.get('x-kiln-route') ?? '');
    expect(routes.filter((r) => r.includes('overflow=false'))).toHaveLength(2);
    expect(routes.filter((r) => r.includes('engine=cloud') && r.includes('overflow=true'))).toHaveLength(4);
    expect(cloud[0]?.stats().requests).toBe(4);
  });

  it('without overflow, requests wait for a free replica and then time out cleanly', async () => {
    sims = await simPool(1, { decodeMsPerToken: 25 });
    const server = await start({
      engines: { local: engine('unique', sims, { max_concurrency: 1 }) },
      'routing.queue_timeout': '300ms',
    });
    const answers = await Promise.all([chat(server), chat(server), chat(server)]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 504, 504]);
    const late = answers.find((a) => a.status === 504);
    expect(late?.body.error).toMatchObject({ code: 'engine-timeout', type: 'server_error' });
    expect(late?.body.job).toMatchObject({ status: 'failed', code: 'engine-timeout' });
  });

  it('a replica dying mid-stream: the client sees an error, the job fails inference-failed', async () => {
    sims = await simPool(1, { decodeMsPerToken: 5 });
    await sims[0]?.setFault({ kind: 'drop-mid-stream', afterChunks: 3 });
    const server = await start({ engines: { local: engine('unique', sims) } });
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.adminKey, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'tell me a story' }],
      max_tokens: 30,
      stream: true,
    });
    let chunks = 0;
    await expect(
      (async () => {
        for await (const _ of stream) chunks++;
      })(),
    ).rejects.toThrow(/broke off|before \[DONE\]|ended/);
    expect(chunks).toBeGreaterThan(0);
    const failed = await server.call('GET', '/v1/jobs?kind=chat&status=failed');
    expect(failed.body.data[0]).toMatchObject({ status: 'failed', code: 'inference-failed' });
  });

  it('a replica refusing connections is skipped: the request is retried on another', async () => {
    sims = await simPool(2);
    await sims[0]?.setFault({ kind: 'refuse' });
    const server = await start({ engines: { local: engine('unique', sims) } });
    for (let i = 0; i < 4; i++) {
      const answer = await chat(server, { max_tokens: 2 });
      expect(answer.status).toBe(200);
      expect(answer.headers.get('x-kiln-route')).toMatch(/replica=1/);
    }
    expect(sims[1]?.stats().requests).toBe(4);
  });

  it('a stream that fails before any output is an HTTP error; after a retry the header names the replica that answered', async () => {
    sims = await simPool(2);
    await sims[0]?.setFault({ kind: 'refuse' });
    await sims[1]?.setFault({ kind: 'error', status: 500, message: 'CUDA error' });
    const server = await start({ engines: { local: engine('unique', sims) } });
    const failed = await chat(server, { stream: true });
    expect(failed.status).toBe(502);
    expect(failed.body.error.code).toBe('inference-failed');
    expect(failed.body.error.message).not.toMatch(/127\.0\.0\.1/);

    await sims[1]?.setFault(undefined);
    const ok = await chat(server, { stream: true, max_tokens: 3 });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-kiln-route')).toMatch(/replica=1/);
    expect(String(ok.body)).toMatch(/data: \[DONE\]/);
  });

  it('a hanging replica times out: 504 engine-timeout, the job failed (the engine’s failure, not its own limit)', async () => {
    sims = await simPool(1);
    await sims[0]?.setFault({ kind: 'hang' });
    const server = await start({ engines: { local: engine('unique', sims, { timeout: '300ms' }) } });
    const started = Date.now();
    const answer = await chat(server);
    expect(answer.status).toBe(504);
    expect(answer.body.error.code).toBe('engine-timeout');
    expect(answer.body.job.status).toBe('failed');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('a client that goes away cancels the engine call', async () => {
    sims = await simPool(1, { decodeMsPerToken: 50 });
    const server = await start({ engines: { local: engine('unique', sims) } });
    const controller = new AbortController();
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: 'long' }],
        max_tokens: 200,
        stream: true,
      }),
      signal: controller.signal,
    });
    const reader = response.body?.getReader();
    await reader?.read();
    expect(sims[0]?.stats().running).toBe(1);
    controller.abort();
    for (let i = 0; i < 50 && sims[0]?.stats().running !== 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(sims[0]?.stats().running).toBe(0);
    const cancelled = await server.call('GET', '/v1/jobs?kind=chat&status=cancelled');
    expect(cancelled.body.data).toHaveLength(1);
  });

  it('a replica that keeps failing is ejected for a cool-down; the others take its share', async () => {
    sims = await simPool(2);
    await sims[0]?.setFault({ kind: 'error', status: 500, message: 'CUDA out of memory' });
    const server = await start({ engines: { local: engine('unique', sims) } });
    const answeredByTheOther = async () => {
      const answer = await chat(server, { max_tokens: 2 });
      expect(answer.status).toBe(200);
      expect(answer.headers.get('x-kiln-route')).toMatch(/replica=1/);
    };
    // Replica 0's failures as Kiln counts them (the simulator's own stats skip faulted requests).
    const failuresOfReplica0 = async () =>
      sample(
        (await server.call('GET', '/metrics')).body as string,
        'kiln_engine_errors_total{engine="local",replica="0",kind="unavailable"}',
      ) ?? 0;
    // Whatever the router picks, the caller gets replica 1's answer: a request sent to replica 0
    // fails there and is retried. Which replica a prompt goes to first is the policy's choice, so
    // requests go on until replica 0 has failed three times (60 requests all missing it: 2^-60).
    for (let i = 0; i < 60 && (await failuresOfReplica0()) < 3; i++) await answeredByTheOther();
    expect(await failuresOfReplica0()).toBe(3);
    // Three failures eject it: for its cool-down it is not even tried.
    for (let i = 0; i < 10; i++) await answeredByTheOther();
    expect(await failuresOfReplica0()).toBe(3);
    const metrics = await server.call('GET', '/metrics');
    expect(metrics.body).toMatch(/kiln_replica_available\{engine="local",replica="0"\} 0/);
    expect(metrics.body).toMatch(
      /kiln_routed_requests_total\{class="unique",engine="local",overflow="false"\} \d+/,
    );
  });

  it('a reload changes routing without a client change and without dropping a request in flight', async () => {
    const first = await simPool(1, { decodeMsPerToken: 20 });
    const second = await simPool(1);
    sims = [...first, ...second];
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-reload-'));
    const file = path.join(dir, 'kiln.yaml');
    const fleet = (name: string, pool: LlmSim[]) =>
      `engines:\n  ${name}:\n    serves: unique\n    replicas: [${pool[0]?.url}]\n    models: { m: sim-model }\npersonas:\n  helper: { model: m }\n`;
    writeFileSync(file, fleet('first', first));
    const server = await startTestServer(storeCases[0] as (typeof storeCases)[0], {}, { configFile: file });
    kiln = server;
    const ask = (body: Record<string, unknown> = {}) =>
      server.call('POST', '/v1/chat/completions', {
        body: { model: 'helper', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...body },
      });
    expect((await ask()).headers.get('x-kiln-route')).toMatch(/engine=first/);

    const inFlight = ask({ max_tokens: 30 }); // ~600 ms on the first engine
    await new Promise((r) => setTimeout(r, 100));
    writeFileSync(file, fleet('second', second));
    const member = await server.key('default');
    expect((await server.call('POST', '/admin/reload', { key: member })).status).toBe(403);
    // A body changes nothing: the role is checked before it is read.
    expect((await server.call('POST', '/admin/reload', { key: member, body: { a: 1 } })).status).toBe(403);
    const reloaded = await server.call('POST', '/admin/reload');
    expect(reloaded.status).toBe(200);
    expect((await ask()).headers.get('x-kiln-route')).toMatch(/engine=second/);
    const survivor = await inFlight;
    expect(survivor.status).toBe(200);
    expect(survivor.headers.get('x-kiln-route')).toMatch(/engine=first/);

    writeFileSync(file, 'personas:\n  helper: { model: nowhere }\n');
    const refused = await server.call('POST', '/admin/reload');
    expect(refused.status).toBe(400);
    expect(refused.body.error.details[0].message).toMatch(
      /personas\.helper\.model: no local engine serves nowhere/,
    );
    expect((await ask()).headers.get('x-kiln-route')).toMatch(/engine=second/);
    rmSync(dir, { recursive: true, force: true });
  });
});
