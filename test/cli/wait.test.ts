import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { KilnClient } from '../../src/client/index.js';
import { KILN_BIN, kiln } from '../helpers/cli.js';
import { callGateway } from '../helpers/http.js';
import { closedPort } from '../helpers/ports.js';
import { processWorld, startServerProcess, waitUntil } from '../helpers/process.js';
import { sample } from '../helpers/scrape.js';
import { storeCases } from '../helpers/stores.js';

/**
 * Waiting for a job outlives a gateway that stops answering for a while (a restart, a rolling
 * upgrade): polls only read, so `kiln jobs wait` sends them again, and when it gives up it says
 * the job goes on and how to wait again.
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];
const POLLED = 'kiln_http_requests_total{method="GET",route="/v1/jobs/:id",status="200"}';
const retrying = (id: string) =>
  new RegExp(`^kiln: polling ${id} failed: .+; trying again for up to a minute$`, 'm');

describe('kiln jobs wait across a gateway restart', () => {
  const world = processWorld(sqlite, 'kiln-cli-wait-');
  afterAll(() => world.cleanup());

  it('keeps polling while the gateway is down and prints the job once the restarted gateway finished it', async () => {
    // The same port and data dir (SQLite store) before and after, as a restart in place has.
    const env = world.env({ KILN_PORT: String(await closedPort()), KILN_SHUTDOWN_GRACE: '1s' });
    const first = await startServerProcess(env);
    const key = world.adminKey();
    const submitted = await callGateway(first.url, key, 'POST', '/v1/test/sleep', { ms: 3000 });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
    const id = submitted.body.id as string;

    const waiting = kiln(['jobs', 'wait', id, '--interval', '200'], {
      env: { KILN_BASE_URL: first.url, KILN_API_KEY: key },
      timeoutMs: 45_000,
    });
    // The gateway goes only once the wait has polled it: a first poll that finds no gateway fails
    // at once (the address may be wrong), and a slow machine can take a second to start the CLI.
    await waitUntil(
      async () => {
        const scrape = await callGateway(first.url, key, 'GET', '/metrics');
        return (sample(String(scrape.body), POLLED) ?? 0) > 0;
      },
      { timeoutMs: 15_000, describe: () => 'the first poll of kiln jobs wait' },
    );
    // SIGTERM: the drain gives the job 1 s, then puts it back in the queue and exits.
    await first.kill('SIGTERM');
    await sleep(1500);
    const second = await startServerProcess(env);
    expect(second.url).toBe(first.url);

    const waited = await waiting;
    expect(waited.code, waited.stderr).toBe(0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id, status: 'completed' });
    expect(waited.stderr).toMatch(retrying(id));
  }, 60_000);
});

describe('kiln jobs wait against a gateway answering 503', () => {
  let fake: Server | undefined;
  afterEach(async () => {
    await new Promise((resolve) => fake?.close(resolve));
  });

  /** A gateway that answers the first `unavailable` polls 503 with Retry-After: 1, then the completed job. */
  async function flakyGateway(unavailable: number): Promise<{ url: string; polls: number[] }> {
    const polls: number[] = [];
    fake = createServer((_request, response) => {
      polls.push(Date.now());
      if (polls.length <= unavailable) {
        response.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
        const error = {
          type: 'server_error',
          code: 'shutting-down',
          message: 'this gateway is shutting down',
        };
        return response.end(JSON.stringify({ error }));
      }
      response.writeHead(200, { 'content-type': 'application/json' });
      const job = {
        id: 'test-1',
        object: 'job',
        kind: 'test.sleep',
        status: 'completed',
        result: { ok: true },
      };
      response.end(JSON.stringify({ ...job, created: 1, started_at: 1, finished_at: 2 }));
    });
    await new Promise<void>((resolve) => fake?.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(fake.address() as AddressInfo).port}`, polls };
  }

  it('tries again after the Retry-After the gateway asked for, and prints the job', async () => {
    const gateway = await flakyGateway(2);
    const waited = await kiln(['jobs', 'wait', 'test-1', '--interval', '100'], {
      env: { KILN_BASE_URL: gateway.url, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(waited.code, waited.stderr).toBe(0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id: 'test-1', status: 'completed' });
    expect(waited.stderr).toBe(
      'kiln: polling test-1 failed: shutting-down (HTTP 503); trying again for up to a minute\n',
    );
    expect(gateway.polls).toHaveLength(3);
    for (let i = 1; i < gateway.polls.length; i++) {
      expect((gateway.polls[i] as number) - (gateway.polls[i - 1] as number)).toBeGreaterThanOrEqual(950);
    }
  });

  it('gives up within --timeout, saying the job goes on and how to wait again', async () => {
    const gateway = await flakyGateway(Number.POSITIVE_INFINITY);
    const started = Date.now();
    const waited = await kiln(['jobs', 'wait', 'test-1', '--timeout', '2'], {
      env: { KILN_BASE_URL: gateway.url, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(Date.now() - started).toBeLessThan(8000);
    expect(waited.code).toBe(1);
    expect(waited.stdout).toBe('');
    expect(waited.stderr).toMatch(
      /^kiln: polling test-1 failed: shutting-down \(HTTP 503\); trying again for up to a minute\n/,
    );
    expect(waited.stderr).toMatch(
      /\nkiln: shutting-down \(HTTP 503\): this gateway is shutting down\nkiln: stopped waiting for job test-1 after 2 s of failed polls; the job goes on \(kiln jobs wait test-1\)\n$/,
    );
    expect(gateway.polls.length).toBeGreaterThanOrEqual(2);
  });

  it('fails at once where nothing has answered yet: a wrong address is not waited on for a minute', async () => {
    const started = Date.now();
    const waited = await kiln(['jobs', 'wait', 'test-1'], {
      env: { KILN_BASE_URL: `http://127.0.0.1:${await closedPort()}`, KILN_API_KEY: 'kiln_sk_any' },
    });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(waited.code).toBe(1);
    expect(waited.stderr).toContain('nothing is listening there');
    expect(waited.stderr).not.toContain('trying again');
  });
});

describe('kiln jobs wait against a gateway that stops answering', () => {
  let fake: Server | undefined;
  afterEach(async () => {
    fake?.closeAllConnections();
    await new Promise((resolve) => fake?.close(resolve));
  });

  /** A gateway that answers the first `answered` polls with a running job, then holds every poll open. */
  async function stuckGateway(answered: number): Promise<string> {
    let polls = 0;
    fake = createServer((_request, response) => {
      if (++polls > answered) return;
      response.writeHead(200, { 'content-type': 'application/json' });
      const job = { id: 'test-1', object: 'job', kind: 'test.sleep', status: 'running' };
      response.end(JSON.stringify({ ...job, created: 1, started_at: 1, finished_at: null }));
    });
    await new Promise<void>((resolve) => fake?.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
  }

  // KILN_TIMEOUT stays a minute: a poll left to it would outlast the test.
  it('gives up at --timeout with the job as last seen, not a minute later when the poll times out', async () => {
    const waited = await kiln(['jobs', 'wait', 'test-1', '--timeout', '1', '--interval', '100'], {
      env: { KILN_BASE_URL: await stuckGateway(1), KILN_API_KEY: 'kiln_sk_any', KILN_TIMEOUT: '60' },
    });
    expect(waited.code).toBe(1);
    expect(waited.stdout).toBe('');
    expect(waited.stderr).toContain(
      'job test-1 is still running after 1 s; it goes on (kiln jobs get test-1)',
    );
  }, 20_000);

  it('gives up at --timeout when not even the first poll is answered', async () => {
    const waited = await kiln(['jobs', 'wait', 'test-1', '--timeout', '1'], {
      env: { KILN_BASE_URL: await stuckGateway(0), KILN_API_KEY: 'kiln_sk_any', KILN_TIMEOUT: '60' },
    });
    expect(waited.code).toBe(1);
    expect(waited.stderr).toContain(
      'job test-1: no poll was answered within 1 s; it goes on (kiln jobs get test-1)',
    );
  }, 20_000);
});

describe('the client: a gateway that goes away right after it accepted a job', () => {
  it('chat.submit then jobs.wait rides out the restart: the submission answered, so the address is right', async () => {
    const port = await closedPort();
    const job = { id: 'chatcmpl-1', object: 'job', kind: 'chat', created: 1, started_at: 1 };
    const answering = (polls: () => Record<string, unknown>) =>
      createServer((request, response) => {
        response.writeHead(request.method === 'POST' ? 202 : 200, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify(
            request.method === 'POST'
              ? {
                  id: 'chatcmpl-1',
                  object: 'chat.completion.async',
                  status: 'queued',
                  polling_url: '/v1/jobs/1',
                  created: 1,
                }
              : polls(),
          ),
        );
      });
    const listen = (server: Server) =>
      new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    const first = answering(() => ({ ...job, status: 'running' }));
    await listen(first);
    const client = new KilnClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: 'kiln_sk_any' });
    const submitted = await client.chat.submit({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    first.closeAllConnections();
    await new Promise((resolve) => first.close(resolve));
    // Down for a while, then back with the job done.
    const second = answering(() => ({ ...job, status: 'completed', finished_at: 2, result: { ok: true } }));
    setTimeout(() => void listen(second), 1500);
    try {
      const done = await client.jobs.wait(submitted.id, { intervalMs: 100 });
      expect(done.status).toBe('completed');
    } finally {
      await new Promise((resolve) => second.close(resolve));
    }
  });
});

describe('kiln chat --async --wait and kiln jobs wait interrupted', () => {
  it.each([
    ['chat --async --wait', ['chat', '--model', 'm', '--async', '--wait', 'hi']],
    ['jobs wait', ['jobs', 'wait', 'chatcmpl-01a21f30-0000-7000-8000-000000000001']],
  ])('%s: on Ctrl-C says the job goes on and how to pick it up again', async (command, args) => {
    const id = 'chatcmpl-01a21f30-0000-7000-8000-000000000001';
    let polls = 0;
    const gateway = createServer((request, response) => {
      if (request.method === 'GET') polls++;
      response.writeHead(request.method === 'POST' ? 202 : 200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify(
          request.method === 'POST'
            ? {
                id,
                object: 'chat.completion.async',
                status: 'queued',
                polling_url: `/api/v1/jobs/${id}`,
                created: 1,
              }
            : {
                id,
                object: 'job',
                kind: 'chat',
                status: 'running',
                created: 1,
                started_at: 1,
                finished_at: null,
              },
        ),
      );
    });
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    try {
      const child = spawn(process.execPath, [KILN_BIN, ...args], {
        env: {
          PATH: process.env.PATH ?? '',
          KILN_BASE_URL: `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`,
          KILN_API_KEY: 'kiln_sk_any',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk;
      });
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      // The wait has begun once the job has been polled.
      await waitUntil(() => (polls > 0 ? true : undefined), {
        timeoutMs: 10_000,
        describe: () => `the first poll; stderr: ${stderr}`,
      });
      child.kill('SIGINT');
      expect(await exited).toBe(130);
      // The chat command names the job before it waits.
      expect(stderr).toBe(
        (command === 'jobs wait' ? '' : `submitted ${id}; waiting for it\n`) +
          `kiln: stopped waiting; the job goes on (kiln jobs wait ${id}, or kiln jobs cancel ${id})\n`,
      );
    } finally {
      gateway.closeAllConnections();
      await new Promise((resolve) => gateway.close(resolve));
    }
  });
});
