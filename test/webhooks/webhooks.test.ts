import { createHmac } from 'node:crypto';
import dc from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../src/client/index.js';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { type RunningServer, startServer } from '../../src/server.js';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { kiln } from '../helpers/cli.js';
import { startTestDns, type TestDns } from '../helpers/dns.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/*
 * Webhook delivery end to end: the real server with the test-only sleep kind, real HTTP receivers
 * on 127.0.0.1 and a real DNS server on 127.0.0.1 for host names. Nothing may leave loopback: every
 * socket this process opens is recorded, and only 127.0.0.1 (and the PostgreSQL under test) may be
 * dialled. Unsafe addresses are refused before any connection is attempted.
 */

const RETRY_MS = [100, 200, 300];
const SETTLE_MS = 450; // longer than the first retry delays: time for a duplicate to show up if there were one

let dns: TestDns;
/** `ip:port` of every outbound connection attempt made by this process. */
const dialled: string[] = [];
const recordDial = (message: unknown) => {
  const { socket } = message as { socket: Socket };
  socket.on('connectionAttempt', (ip: string, port: number) => dialled.push(`${ip}:${port}`));
};
const pg = new URL(POSTGRES_URL);
const pgPort = pg.port || '5432';
/** 127.0.0.1, also in its IPv4-mapped IPv6 form (a webhook URL may spell it [::ffff:127.0.0.1]). */
const LOOPBACK_FORMS = new Set(['127.0.0.1', '::ffff:127.0.0.1', '::ffff:7f00:1']);
const toLoopback = (dial: string) => LOOPBACK_FORMS.has(dial.slice(0, dial.lastIndexOf(':')));
/** Every dial went to 127.0.0.1, apart from the database the PostgreSQL cases use. */
const onlyLoopbackDialled = () =>
  expect(dialled.filter((a) => !toLoopback(a) && !a.endsWith(`:${pgPort}`))).toEqual([]);

beforeAll(async () => {
  dc.subscribe('net.client.socket', recordDial);
  dns = await startTestDns({
    'receiver.hook.test': ['127.0.0.1'],
    'linklocal.hook.test': ['169.254.10.10'],
    'private.hook.test': ['10.0.0.5'],
    'loopback2.hook.test': ['127.0.0.2'],
    'mixed.hook.test': ['127.0.0.1', '169.254.169.254'],
    'imds6.hook.test': ['fd00:ec2::254'],
    'multicast.hook.test': ['224.0.0.251'],
    // Listed in allow_hosts by name, and still refused: link-local/metadata can never be allowed.
    'named.allowed.test': ['169.254.169.254'],
  });
});

afterAll(async () => {
  dc.unsubscribe('net.client.socket', recordDial);
  await dns?.close();
  onlyLoopbackDialled();
});

const serverOverrides = (extra: Record<string, unknown> = {}) => ({
  'webhooks.retry_schedule': RETRY_MS.map((ms) => `${ms}ms`),
  'webhooks.jitter': 0,
  'webhooks.timeout': '1s',
  'security.allow_hosts': ['127.0.0.1', 'named.allowed.test'],
  'security.dns_servers': [dns.server],
  'jobs.poll_interval_ms': 100,
  ...extra,
});

// ---------------------------------------------------------------------------------------------
// A webhook receiver: records every request (raw body bytes included) and answers from a script.

type Answer = number | 'reset' | 'hang' | { status: number; headers: Record<string, string> };

interface Hit {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  at: number;
  answer: Answer;
}

interface Receiver {
  /** `http://127.0.0.1:<port>` */
  base: string;
  port: number;
  hits: Hit[];
  /** The answer to the n-th request; `fallback` once they run out. Both may be changed at any time. */
  answers: Answer[];
  fallback: Answer;
  close(): Promise<void>;
}

async function startReceiver(answers: Answer[] = [], fallback: Answer = 200): Promise<Receiver> {
  const sockets = new Set<Socket>();
  const receiver: Receiver = {
    base: '',
    port: 0,
    hits: [],
    answers,
    fallback,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const answer = receiver.answers[receiver.hits.length] ?? receiver.fallback;
      receiver.hits.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: Date.now(),
        answer,
      });
      if (answer === 'reset') req.socket.resetAndDestroy();
      else if (answer === 'hang') return;
      else if (typeof answer === 'number') res.writeHead(answer, { 'content-type': 'text/plain' }).end('ok');
      else res.writeHead(answer.status, answer.headers).end();
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('receiver has no port');
  receiver.port = address.port;
  receiver.base = `http://127.0.0.1:${address.port}`;
  return receiver;
}

// ---------------------------------------------------------------------------------------------
// Small helpers over the running server.

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 6000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

interface DeliveryRow {
  id: string;
  status: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
}

const deliveryRow = (store: RunningServer['store'], jobId: string) =>
  store.driver.get<DeliveryRow>(
    'SELECT id, status, attempts, last_status, last_error FROM webhook_deliveries WHERE job_id = ?',
    [jobId],
  );

/** The delivery row once its status is one of `statuses`. */
const settled = (store: RunningServer['store'], jobId: string, ...statuses: string[]) =>
  until(`webhook delivery of ${jobId} to be ${statuses.join('/')}`, async () => {
    const row = await store.webhooks.forJob(jobId);
    return row && statuses.includes(row.status) ? row : undefined;
  });

async function submit(
  server: TestServer,
  key: string,
  body: Record<string, unknown>,
): Promise<{ publicId: string; jobId: string }> {
  const answer = await server.call('POST', '/v1/test/sleep', { key, body });
  expect(answer.status, JSON.stringify(answer.body)).toBe(202);
  return { publicId: answer.body.id, jobId: String(answer.body.polling_url).split('/').pop() as string };
}

/** GET /v1/jobs/<id>: the raw bytes the API answers, not a re-serialisation. */
async function pollRaw(server: TestServer, key: string, publicId: string): Promise<string> {
  const response = await fetch(`${server.url}/v1/jobs/${publicId}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  expect(response.status).toBe(200);
  return response.text();
}

const orgId = async (server: TestServer, name: string) => {
  const org = await server.server.store.orgs.byName(name);
  if (!org) throw new Error(`no org ${name}`);
  return org.id;
};

async function count(server: TestServer, table: 'jobs' | 'webhook_deliveries'): Promise<number> {
  const row = await server.server.store.driver.get<{ n: number | string }>(
    `SELECT COUNT(*) AS n FROM ${table}`,
  );
  return Number(row?.n);
}

/** `t=<unix>,v1=<hex>` parsed, and checked with an HMAC computed here, independently of src/. */
function checkSignature(hit: Hit, secret: string): number {
  const header = hit.headers['x-service-signature'];
  expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
  const [, t, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(header)) as RegExpExecArray;
  const expected = createHmac('sha256', secret)
    .update(`${t}.${hit.body.toString('utf8')}`)
    .digest('hex');
  expect(v1).toBe(expected);
  expect(Math.abs(Number(t) - hit.at / 1000)).toBeLessThan(5);
  return Number(t);
}

const newSecret = () => `whsec_test_${Math.random().toString(36).slice(2)}`;

/** A store case handing out one store that outlives the servers started on it (removed by the test). */
function fixedStore(storeCase: StoreCase): {
  storeCase: StoreCase;
  store: Config['store'];
  remove(): Promise<void>;
} {
  const fresh = storeCase.fresh();
  return {
    storeCase: { ...storeCase, fresh: () => ({ store: fresh.store, cleanup: async () => undefined }) },
    store: fresh.store,
    remove: () => fresh.cleanup(),
  };
}

/**
 * The server again on an existing store. startTestServer cannot do this: it reads the admin key
 * the first start writes, and a store that already has organisations writes none.
 */
async function restartOn(
  store: Config['store'],
  overrides: Record<string, unknown>,
  kind: ReturnType<typeof sleepKind>,
): Promise<{ server: RunningServer; close(): Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-webhooks-'));
  const config = loadConfig({
    env: {},
    file: undefined,
    overrides: {
      data_dir: dataDir,
      port: 0,
      'store.url': store.url,
      'store.schema': store.schema,
      ...overrides,
    },
  });
  const server = await startServer(config, pino({ level: process.env.KILN_TEST_LOG ?? 'silent' }), {
    kinds: [kind],
    routes: sleepRoutes(kind),
  });
  return {
    server,
    async close() {
      await server.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`webhooks: ${caseTitle(storeCase)}`, () => {
    const kind = sleepKind();
    let server: TestServer;
    let key: string;
    let orgN = 0;
    const receivers: Receiver[] = [];
    const receiver = async (answers: Answer[] = [], fallback: Answer = 200) => {
      const r = await startReceiver(answers, fallback);
      receivers.push(r);
      return r;
    };
    /** A key in an organisation of its own, so that organisation secrets do not leak between tests. */
    const freshOrg = async () => {
      const name = `hooks-${++orgN}`;
      return { name, key: await server.key(name) };
    };

    beforeAll(async () => {
      server = await startTestServer(storeCase, serverOverrides(), {
        kinds: [kind],
        routes: sleepRoutes(kind),
      });
      key = await server.key('hooks');
    });

    afterEach(async () => {
      await Promise.all(receivers.splice(0).map((r) => r.close()));
    });

    afterAll(async () => {
      await server?.close();
    });

    it('POSTs a completed job once: the poll body byte for byte, signed with the submission secret', async () => {
      const hook = await receiver();
      const secret = newSecret();
      const { publicId, jobId } = await submit(server, key, {
        ms: 20,
        webhook: { url: `${hook.base}/hooks/kiln?x=1`, secret },
      });
      const row = await settled(server.server.store, jobId, 'delivered', 'failed', 'gone');
      expect(row).toMatchObject({ status: 'delivered', attempts: 1, last_status: 200 });
      await sleep(SETTLE_MS);
      expect(hook.hits).toHaveLength(1);
      const hit = hook.hits[0] as Hit;

      expect(hit.method).toBe('POST');
      expect(hit.path).toBe('/hooks/kiln?x=1');
      expect(hit.headers['content-type']).toBe('application/json');
      expect(hit.headers['x-service-event']).toBe('job.completed');
      expect(hit.headers['x-service-webhook-id']).toBe(row.id);
      expect(hit.headers['x-service-webhook-id']).toMatch(/^whd_[0-9A-Za-z]+$/);

      // The body is the poll body: same JSON, and exactly its serialisation, byte for byte.
      const raw = hit.body.toString('utf8');
      const polled = await pollRaw(server, key, publicId);
      const pollBody = JSON.parse(polled);
      expect(JSON.parse(raw)).toEqual(pollBody);
      expect(raw).toBe(JSON.stringify(pollBody));
      expect(raw).toBe(polled);
      expect(pollBody).toMatchObject({
        id: publicId,
        object: 'job',
        kind: 'test.sleep',
        status: 'completed',
        result: { slept: 20, attempt: 1 },
      });

      // The signature, checked by an HMAC of our own and by the SDK.
      const t = checkSignature(hit, secret);
      expect(verifyWebhook(secret, hit.headers, hit.body)).toBe(true);
      expect(verifyWebhook(secret, hit.headers, raw)).toBe(true);
      expect(verifyWebhook(secret, new Headers(hit.headers as Record<string, string>), hit.body)).toBe(true);
      const tampered = Buffer.from(hit.body);
      const at = tampered.indexOf('"completed"') + 1;
      tampered[at] = (tampered[at] as number) ^ 0x01; // "completed" → "bompleted"
      expect(tampered.equals(hit.body)).toBe(false);
      expect(verifyWebhook(secret, hit.headers, tampered)).toBe(false);
      expect(verifyWebhook(`${secret}x`, hit.headers, hit.body)).toBe(false);
      expect(verifyWebhook('', hit.headers, hit.body)).toBe(false);
      expect(verifyWebhook(secret, hit.headers, hit.body, 300, (t + 299) * 1000)).toBe(true);
      expect(verifyWebhook(secret, hit.headers, hit.body, 300, (t + 301) * 1000)).toBe(false);
      expect(verifyWebhook(secret, hit.headers, hit.body, 300, (t - 301) * 1000)).toBe(false);
      expect(verifyWebhook(secret, hit.headers, hit.body, 10, (t + 11) * 1000)).toBe(false);
      expect(verifyWebhook(secret, {}, hit.body)).toBe(false);
      // A replayed signature with the timestamp moved into the window does not verify either.
      const moved = String(hit.headers['x-service-signature']).replace(/^t=\d+/, `t=${t + 1000}`);
      expect(verifyWebhook(secret, { 'x-service-signature': moved }, hit.body, 300, (t + 1000) * 1000)).toBe(
        false,
      );
    });

    it('signs with a submission secret of any length the spec allows; an empty one is a 400', async () => {
      const hook = await receiver();
      // The spec sets no length for `secret`: a short one is the receiver's choice, and it signs.
      const { jobId } = await submit(server, key, {
        ms: 5,
        webhook: { url: `${hook.base}/short`, secret: 'k3y' },
      });
      await settled(server.server.store, jobId, 'delivered');
      const hit = hook.hits[0] as Hit;
      checkSignature(hit, 'k3y');
      expect(verifyWebhook('k3y', hit.headers, hit.body)).toBe(true);
      // An empty secret signs with nothing: refused, naming the field, before any job exists.
      const empty = await server.call('POST', '/v1/test/sleep', {
        key,
        body: { ms: 5, webhook: { url: `${hook.base}/empty`, secret: '' } },
      });
      expect([empty.status, empty.body.error.details?.[0]?.field]).toEqual([400, 'webhook.secret']);
    });

    it('signs with the organisation secret when the submission brings none (kiln webhooks secret)', async () => {
      const hook = await receiver();
      const org = await freshOrg();
      const id = await orgId(server, org.name);
      expect(await server.server.store.orgs.webhookSecret(id)).toBeNull();

      const first = await submit(server, org.key, { ms: 5, webhook: { url: `${hook.base}/org` } });
      const orgSecret = await server.server.store.orgs.webhookSecret(id);
      expect(orgSecret).toMatch(/^whsec_[0-9A-Za-z]{32}$/);
      await settled(server.server.store, first.jobId, 'delivered');
      const hit = hook.hits[0] as Hit;
      checkSignature(hit, orgSecret as string);
      expect(verifyWebhook(orgSecret as string, hit.headers, hit.body)).toBe(true);

      // A second submission keeps the secret; one with its own secret is signed with that instead.
      const own = newSecret();
      const second = await submit(server, org.key, {
        ms: 5,
        webhook: { url: `${hook.base}/own`, secret: own },
      });
      await settled(server.server.store, second.jobId, 'delivered');
      expect(await server.server.store.orgs.webhookSecret(id)).toBe(orgSecret);
      const ownHit = hook.hits[1] as Hit;
      expect(verifyWebhook(own, ownHit.headers, ownHit.body)).toBe(true);
      expect(verifyWebhook(orgSecret as string, ownHit.headers, ownHit.body)).toBe(false);

      // `kiln webhooks secret` prints the secret in force, and --rotate replaces it for what follows.
      const store = server.server.runtime.config.store;
      const cwd = mkdtempSync(path.join(tmpdir(), 'kiln-cli-'));
      try {
        const env = { KILN_STORE_URL: store.url, KILN_STORE_SCHEMA: store.schema, KILN_LOG_LEVEL: 'silent' };
        const shown = await kiln(['webhooks', 'secret', '--org', org.name], { env, cwd });
        expect(shown.stderr).toBe('');
        expect(shown.code).toBe(0);
        expect(shown.stdout.trim()).toBe(orgSecret);
        const rotated = await kiln(['webhooks', 'secret', '--org', org.name, '--rotate'], { env, cwd });
        expect(rotated.code).toBe(0);
        const next = rotated.stdout.trim();
        expect(next).toMatch(/^whsec_/);
        expect(next).not.toBe(orgSecret);
        expect(await server.server.store.orgs.webhookSecret(id)).toBe(next);

        const third = await submit(server, org.key, { ms: 5, webhook: { url: `${hook.base}/rotated` } });
        await settled(server.server.store, third.jobId, 'delivered');
        const rotatedHit = hook.hits[2] as Hit;
        expect(verifyWebhook(next, rotatedHit.headers, rotatedHit.body)).toBe(true);
        expect(verifyWebhook(orgSecret as string, rotatedHit.headers, rotatedHit.body)).toBe(false);
      } finally {
        rmSync(cwd, { recursive: true, force: true });
      }
    });

    it('retries a 500 and a connection reset with the same webhook id, then delivers once', async () => {
      const hook = await receiver([500, 'reset', 200]);
      const secret = newSecret();
      const { jobId } = await submit(server, key, { ms: 5, webhook: { url: `${hook.base}/flaky`, secret } });
      const row = await settled(server.server.store, jobId, 'delivered', 'failed', 'gone');
      expect(row).toMatchObject({ status: 'delivered', attempts: 3, last_status: 200 });
      await sleep(SETTLE_MS);

      expect(hook.hits.map((h) => h.answer)).toEqual([500, 'reset', 200]);
      const ids = new Set(hook.hits.map((h) => h.headers['x-service-webhook-id']));
      expect([...ids]).toEqual([row.id]);
      // Same bytes every time; each attempt signed afresh; spaced by the retry schedule.
      for (const hit of hook.hits) {
        expect(hit.body.equals((hook.hits[0] as Hit).body)).toBe(true);
        checkSignature(hit, secret);
      }
      const [a, b, c] = hook.hits.map((h) => h.at) as [number, number, number];
      expect(b - a).toBeGreaterThanOrEqual((RETRY_MS[0] as number) - 10);
      expect(c - b).toBeGreaterThanOrEqual((RETRY_MS[1] as number) - 10);
    });

    it('delivers job.failed with the error code and extra fields in the body', async () => {
      const hook = await receiver();
      const secret = newSecret();
      const { publicId, jobId } = await submit(server, key, {
        ms: 5,
        fail: 'x',
        webhook: { url: `${hook.base}/failed`, secret },
      });
      await settled(server.server.store, jobId, 'delivered');
      const hit = hook.hits[0] as Hit;
      expect(hit.headers['x-service-event']).toBe('job.failed');
      const raw = hit.body.toString('utf8');
      expect(JSON.parse(raw)).toMatchObject({
        id: publicId,
        status: 'failed',
        code: 'inference-failed',
        message: 'x',
      });
      expect(raw).toBe(await pollRaw(server, key, publicId));
      expect(verifyWebhook(secret, hit.headers, hit.body)).toBe(true);

      const withExtras = await submit(server, key, {
        ms: 5,
        fail: 'checkpoint not found',
        code: 'workflow-model-missing',
        extra: { model: 'sdxl-turbo', upstreamError: 'Value not in list: ckpt_name' },
        webhook: { url: `${hook.base}/failed`, secret },
      });
      await settled(server.server.store, withExtras.jobId, 'delivered');
      const extraHit = hook.hits[1] as Hit;
      expect(extraHit.headers['x-service-event']).toBe('job.failed');
      expect(JSON.parse(extraHit.body.toString('utf8'))).toMatchObject({
        status: 'failed',
        code: 'workflow-model-missing',
        model: 'sdxl-turbo',
        upstreamError: 'Value not in list: ckpt_name',
      });
      expect(extraHit.body.toString('utf8')).toBe(await pollRaw(server, key, withExtras.publicId));
    });

    it('delivers job.cancelled for a cancelled job', async () => {
      const hook = await receiver();
      const secret = newSecret();
      const { publicId, jobId } = await submit(server, key, {
        ms: 10_000,
        webhook: { url: `${hook.base}/cancelled`, secret },
      });
      const cancelled = await server.call('POST', `/v1/jobs/${publicId}/cancel`, { key });
      expect(cancelled.status).toBe(200);
      await settled(server.server.store, jobId, 'delivered');
      const hit = hook.hits[0] as Hit;
      expect(hit.headers['x-service-event']).toBe('job.cancelled');
      expect(JSON.parse(hit.body.toString('utf8'))).toMatchObject({ status: 'cancelled', code: 'cancelled' });
      expect(hit.body.toString('utf8')).toBe(await pollRaw(server, key, publicId));
      expect(verifyWebhook(secret, hit.headers, hit.body)).toBe(true);
    });

    it('stops at a 410 after one attempt', async () => {
      const hook = await receiver([], 410);
      const { jobId } = await submit(server, key, {
        ms: 5,
        webhook: { url: `${hook.base}/gone`, secret: newSecret() },
      });
      const row = await settled(server.server.store, jobId, 'gone', 'delivered', 'failed');
      expect(row).toMatchObject({ status: 'gone', attempts: 1, last_status: 410 });
      await sleep(RETRY_MS.reduce((a, b) => a + b) + 200);
      expect(hook.hits).toHaveLength(1);
      expect(await server.server.store.webhooks.forJob(jobId)).toMatchObject({ status: 'gone', attempts: 1 });
    });

    it('does not follow a redirect, even to another allowed receiver, and retries instead', async () => {
      const target = await receiver();
      const hook = await receiver([], { status: 302, headers: { location: `${target.base}/elsewhere` } });
      const { jobId } = await submit(server, key, {
        ms: 5,
        webhook: { url: `${hook.base}/moved`, secret: newSecret() },
      });
      const row = await settled(server.server.store, jobId, 'failed', 'delivered', 'gone');
      // One attempt, then one per retry delay, then failed for good.
      expect(row).toMatchObject({ status: 'failed', attempts: RETRY_MS.length + 1, last_status: 302 });
      expect(hook.hits).toHaveLength(RETRY_MS.length + 1);
      expect(new Set(hook.hits.map((h) => h.headers['x-service-webhook-id'])).size).toBe(1);
      await sleep(200);
      expect(target.hits).toEqual([]);
      expect(dialled.filter((a) => a === `127.0.0.1:${target.port}`)).toEqual([]);
    });

    it('counts an answer slower than webhooks.timeout as a failure and retries', async () => {
      const hook = await receiver(['hang'], 200);
      const { jobId } = await submit(server, key, {
        ms: 5,
        webhook: { url: `${hook.base}/slow`, secret: newSecret() },
      });
      const row = await settled(server.server.store, jobId, 'delivered', 'failed', 'gone');
      expect(row).toMatchObject({ status: 'delivered', attempts: 2, last_status: 200 });
      const [a, b] = hook.hits as [Hit, Hit];
      expect(b.at - a.at).toBeGreaterThanOrEqual(1000 + (RETRY_MS[0] as number) - 50);
      expect(b.headers['x-service-webhook-id']).toBe(a.headers['x-service-webhook-id']);
    });

    it('keeps a pending delivery across a restart and delivers it with the same webhook id', async () => {
      const fixed = fixedStore(storeCase);
      const overrides = serverOverrides({ 'webhooks.retry_schedule': Array(20).fill('150ms') });
      const hook = await receiver([], 503);
      const secret = newSecret();
      let first: TestServer | undefined = await startTestServer(fixed.storeCase, overrides, {
        kinds: [kind],
        routes: sleepRoutes(kind),
      });
      let second: Awaited<ReturnType<typeof restartOn>> | undefined;
      try {
        const firstKey = await first.key('restart');
        const { jobId } = await submit(first, firstKey, {
          ms: 5,
          webhook: { url: `${hook.base}/restart`, secret },
        });
        await until('two failed attempts', async () => (hook.hits.length >= 2 ? true : undefined));
        await first.close();
        first = undefined;

        // Stopped: the delivery is still owed, and nobody is delivering it.
        const hitsBefore = hook.hits.length;
        const webhookId = hook.hits[0]?.headers['x-service-webhook-id'];
        hook.fallback = 200;
        await sleep(300);
        expect(hook.hits).toHaveLength(hitsBefore);

        second = await restartOn(fixed.store, overrides, kind);
        const pending = await second.server.store.webhooks.forJob(jobId);
        expect(pending).toMatchObject({ id: webhookId, attempts: hitsBefore, last_status: 503 });
        const row = await settled(second.server.store, jobId, 'delivered', 'failed', 'gone');
        expect(row).toMatchObject({ id: webhookId, status: 'delivered', attempts: hitsBefore + 1 });
        await sleep(SETTLE_MS);
        expect(hook.hits).toHaveLength(hitsBefore + 1);
        expect(new Set(hook.hits.map((h) => h.headers['x-service-webhook-id']))).toEqual(
          new Set([webhookId]),
        );
        expect(hook.hits.filter((h) => h.answer === 200)).toHaveLength(1);
        expect(verifyWebhook(secret, hook.hits.at(-1)?.headers ?? {}, hook.hits.at(-1)?.body ?? '')).toBe(
          true,
        );
      } finally {
        await first?.close();
        await second?.close();
        await fixed.remove();
      }
    });

    describe('address safety at submission', () => {
      let loopback: Receiver;
      beforeEach(async () => {
        loopback = await receiver();
      });

      // Every one answered 400 unsafe-url naming webhook.url, before any job exists.
      const unsafe = (port: number): string[] => [
        'http://169.254.169.254/latest/meta-data',
        'http://169.254.169.254/latest/meta-data/iam/security-credentials/',
        'http://[fd00:ec2::254]/',
        'http://[::ffff:169.254.169.254]/',
        'http://[::ffff:a9fe:a9fe]/',
        'http://[64:ff9b::a9fe:a9fe]/',
        'http://2852039166/',
        'http://0251.0376.0251.0376/',
        'http://0xa9fea9fe/',
        'http://169.254.43518/',
        'http://169.254.170.2/v2/credentials',
        'http://metadata.google.internal/computeMetadata/v1/',
        'http://METADATA.google.internal./',
        'http://metadata/',
        'http://100.100.100.200/latest/meta-data',
        'http://192.0.0.192/',
        'http://[fe80::1]/',
        'http://[fe80::1%25eth0]/',
        'http://169.254.1.1/',
        'http://linklocal.hook.test/',
        'http://named.allowed.test/',
        'http://mixed.hook.test/',
        'http://imds6.hook.test/',
        'http://0.0.0.0/',
        `http://0.0.0.0:${port}/`,
        'http://0/',
        'http://[::]/',
        'http://10.0.0.1/',
        'http://192.168.0.1/',
        'http://172.16.0.1/',
        'http://100.64.0.1/',
        'http://[fc00::1]/',
        'http://[::ffff:10.0.0.1]/',
        'http://private.hook.test/',
        `http://127.0.0.2:${port}/`,
        `http://[::1]:${port}/`,
        `http://loopback2.hook.test:${port}/`,
        'http://224.0.0.1/',
        'http://[ff02::1]/',
        'http://multicast.hook.test/',
        'http://255.255.255.255/',
        'http://240.0.0.1/',
        'http://nowhere.hook.test/',
        `ftp://127.0.0.1:${port}/hook`,
        'file:///etc/passwd',
        'gopher://127.0.0.1/',
        `http://user:pw@127.0.0.1:${port}/`,
        'not a url',
      ];

      it('refuses at least 25 unsafe webhook URLs with 400 unsafe-url and records nothing', async () => {
        const urls = unsafe(loopback.port);
        expect(urls.length).toBeGreaterThanOrEqual(25);
        const org = await freshOrg();
        const jobsBefore = await count(server, 'jobs');
        const deliveriesBefore = await count(server, 'webhook_deliveries');
        const dialledBefore = dialled.length;

        const failures: string[] = [];
        for (const [i, url] of urls.entries()) {
          const answer = await server.call('POST', '/v1/test/sleep', {
            key: org.key,
            body: {
              ms: 5,
              ...(i % 4 === 3 ? { mode: 'sync' } : {}),
              webhook: i % 2 ? { url } : { url, secret: newSecret() },
            },
            headers: { 'idempotency-key': `unsafe-${i}` },
          });
          const error = answer.body?.error;
          if (
            answer.status !== 400 ||
            error?.code !== 'unsafe-url' ||
            error?.param !== 'webhook.url' ||
            error?.details?.[0]?.field !== 'webhook.url' ||
            typeof error?.message !== 'string' ||
            !error.message.startsWith('webhook.url ')
          ) {
            failures.push(`${url} → ${answer.status} ${JSON.stringify(answer.body)}`);
          }
        }
        expect(failures).toEqual([]);

        expect(await count(server, 'jobs')).toBe(jobsBefore);
        expect(await count(server, 'webhook_deliveries')).toBe(deliveriesBefore);
        // Not even an organisation secret was created for the secret-less ones.
        expect(await server.server.store.orgs.webhookSecret(await orgId(server, org.name))).toBeNull();
        // No connection was attempted on behalf of any of them (only the test's own API calls).
        const apiPort = new URL(server.url).port;
        const refusedDials = dialled
          .slice(dialledBefore)
          .filter((a) => a !== `127.0.0.1:${apiPort}` && !a.endsWith(`:${pgPort}`));
        expect(refusedDials).toEqual([]);
        expect(loopback.hits).toEqual([]);

        // An idempotency key refused with an unsafe URL is not bound: the same key works once the URL is safe.
        const ok = await server.call('POST', '/v1/test/sleep', {
          key: org.key,
          body: { ms: 5, webhook: { url: `${loopback.base}/ok`, secret: newSecret() } },
          headers: { 'idempotency-key': 'unsafe-0' },
        });
        expect(ok.status).toBe(202);
        expect(ok.headers.get('idempotent-replayed')).toBeNull();
        expect(await count(server, 'jobs')).toBe(jobsBefore + 1);
        const okJob = String(ok.body.polling_url).split('/').pop() as string;
        await settled(server.server.store, okJob, 'delivered');
        expect(loopback.hits.map((h) => h.path)).toEqual(['/ok']);
      });

      it('accepts the allowed loopback receiver, by address and by a name resolving to it', async () => {
        const secret = newSecret();
        const byName = await submit(server, key, {
          ms: 5,
          webhook: { url: `http://receiver.hook.test:${loopback.port}/named`, secret },
        });
        const byMapped = await submit(server, key, {
          ms: 5,
          webhook: { url: `http://[::ffff:127.0.0.1]:${loopback.port}/mapped`, secret },
        });
        await settled(server.server.store, byName.jobId, 'delivered');
        await settled(server.server.store, byMapped.jobId, 'delivered');
        expect(loopback.hits.map((h) => h.path).sort()).toEqual(['/mapped', '/named']);
      });
    });

    it('refuses at delivery time a name that DNS rebinds after submission, and never dials it', async () => {
      const hook = await receiver();
      const secret = newSecret();
      const targets: Array<[string, string[]]> = [
        ['imds', ['169.254.169.254']],
        ['private', ['10.0.0.5']],
        ['loopback2', ['127.0.0.2']],
        ['mixed', ['127.0.0.1', '169.254.169.254']],
        ['imds6', ['fd00:ec2::254']],
      ];
      const dialledBefore = dialled.length;
      const jobs = await Promise.all(
        targets.map(async ([label, to]) => {
          const name = `${label}-${storeCase.name}.rebind.test`;
          dns.records.set(name, ['127.0.0.1']);
          // Safe when submitted: 127.0.0.1 is allowed.
          const { jobId } = await submit(server, key, {
            ms: 300,
            webhook: { url: `http://${name}:${hook.port}/rebind`, secret },
          });
          // …and rebound while the job runs.
          dns.records.set(name, to);
          return { name, to, jobId };
        }),
      );
      for (const { name, to, jobId } of jobs) {
        const row = await settled(server.server.store, jobId, 'failed', 'delivered', 'gone');
        expect(row).toMatchObject({ status: 'failed', attempts: RETRY_MS.length + 1, last_status: null });
        const stored = await deliveryRow(server.server.store, jobId);
        expect(stored?.last_error).toContain(`refused to connect to ${name}`);
        expect(stored?.last_error).toContain(to.find((a) => a !== '127.0.0.1'));
      }
      await sleep(200);
      expect(hook.hits).toEqual([]);
      expect(dialled.slice(dialledBefore).filter((a) => a.endsWith(`:${hook.port}`))).toEqual([]);
      onlyLoopbackDialled();
    });
  });
}
