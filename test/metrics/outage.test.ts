import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCRAPE_STORE_TIMEOUT_MS } from '../../src/metrics/scrape.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { sample } from '../helpers/scrape.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/*
 * /metrics while the store is down: every series that does not come from the store is still served,
 * the queue gauges are left out, and the failure is counted. With `metrics.open` the scraper needs
 * no key, so none has to be checked against the store either.
 */

const ERRORS = 'kiln_store_scrape_errors_total';

/** A scrape with no key; its text, status and how long it took. */
async function scrape(kiln: TestServer) {
  const started = performance.now();
  const answer = await kiln.call('GET', '/metrics', { key: null });
  return { status: answer.status, text: String(answer.body), ms: performance.now() - started };
}

/** What a scrape must still hold with the store down: the process's, HTTP's and the failure count. */
function expectServedWithoutQueue(text: string, errorsBefore: number) {
  expect(sample(text, 'kiln_process_cpu_seconds_total')).toBeGreaterThan(0);
  expect(text).toMatch(/^kiln_http_requests_total\{method="GET",route="\/metrics",status="200"\} \d+$/m);
  expect(text).toContain('# TYPE kiln_jobs_queued gauge');
  // Unknown, not 0: no queue series at all.
  expect(text).not.toMatch(/^kiln_jobs_(queued|running|oldest_queued_age_seconds)\{/m);
  expect(sample(text, ERRORS)).toBe(errorsBefore + 1);
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`/metrics with metrics.open: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    beforeAll(async () => {
      kiln = await startTestServer(storeCase, { 'metrics.open': true });
    });
    afterAll(async () => kiln?.close());

    it('answers a scraper without a key, with the queue gauges while the store answers', async () => {
      const { status, text } = await scrape(kiln);
      expect(status).toBe(200);
      expect(sample(text, 'kiln_jobs_queued{kind="chat"}')).toBe(0);
      expect(sample(text, ERRORS)).toBe(0);
      // Other routes still want a key.
      expect((await kiln.call('GET', '/v1/models', { key: null })).status).toBe(401);
    });

    it('serves everything else, within the bound, when the store fails or hangs', async () => {
      const { jobs } = kiln.server.store;
      const unfinishedByKind = jobs.unfinishedByKind.bind(jobs);
      try {
        jobs.unfinishedByKind = () => Promise.reject(new Error('connection refused'));
        const refused = await scrape(kiln);
        expect(refused.status).toBe(200);
        expectServedWithoutQueue(refused.text, 0);

        jobs.unfinishedByKind = () => new Promise(() => undefined);
        const hung = await scrape(kiln);
        expect(hung.status).toBe(200);
        expectServedWithoutQueue(hung.text, 1);
        expect(hung.ms).toBeGreaterThanOrEqual(SCRAPE_STORE_TIMEOUT_MS - 50);
        expect(hung.ms).toBeLessThan(SCRAPE_STORE_TIMEOUT_MS + 2000);
      } finally {
        jobs.unfinishedByKind = unfinishedByKind;
      }
      const back = await scrape(kiln);
      expect(sample(back.text, 'kiln_jobs_queued{kind="chat"}')).toBe(0);
      expect(sample(back.text, ERRORS)).toBe(2);
    });
  });

  describe.skipIf(storeCase.skip)(`/metrics by default: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    beforeAll(async () => {
      kiln = await startTestServer(storeCase);
    });
    afterAll(async () => kiln?.close());

    it('wants a key', async () => {
      expect((await scrape(kiln)).status).toBe(401);
      expect((await kiln.call('GET', '/metrics')).status).toBe(200);
    });
  });
}

const pgCase = storeCases[1] as StoreCase;

describe.skipIf(pgCase.skip)(`a PostgreSQL server that goes away: ${caseTitle(pgCase)}`, () => {
  const sockets = new Set<Socket>();
  let up = true;
  // Between Kiln and PostgreSQL, so that the test can cut every connection, as an outage does.
  const proxy = createServer((client) => {
    if (!up) return client.destroy();
    const target = new URL(POSTGRES_URL);
    const server = connect(Number(target.port || 5432), target.hostname);
    for (const [from, to] of [
      [client, server],
      [server, client],
    ] as const) {
      sockets.add(from);
      from.pipe(to);
      from.on('error', () => to.destroy());
      from.on('close', () => to.destroy());
    }
  });
  let kiln: TestServer;

  beforeAll(async () => {
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const viaProxy = new URL(POSTGRES_URL);
    viaProxy.host = `127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    const fresh = pgCase.fresh();
    kiln = await startTestServer(
      { ...pgCase, fresh: () => ({ ...fresh, store: { ...fresh.store, url: viaProxy.toString() } }) },
      { 'metrics.open': true },
    );
  });
  afterAll(async () => {
    up = true;
    await kiln?.close();
    await new Promise((resolve) => proxy.close(resolve));
  });

  it('still serves /metrics, without the queue gauges, and counts the failure', async () => {
    expect((await scrape(kiln)).status).toBe(200);
    // A key seen moments ago is cached, but trusted only while revocations can be heard.
    expect((await kiln.call('GET', '/v1/models')).status).toBe(200);
    up = false;
    for (const socket of sockets) socket.destroy();
    const down = await scrape(kiln);
    expect(down.status).toBe(200);
    expectServedWithoutQueue(down.text, 0);
    const keyed = await kiln.call('GET', '/v1/models');
    expect(keyed.status, JSON.stringify(keyed.body)).not.toBe(200);
  });
});
