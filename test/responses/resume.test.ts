import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ResponseLog } from '../../src/responses/log.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import type { PublishedEvent, Store } from '../../src/store/index.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { insertJob } from '../helpers/jobs.js';
import { killAll, startServerProcess } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';
import { takeEvents } from './take.js';

/**
 * A background response created streaming can be streamed again, from where the client left off:
 * `GET /v1/responses/{id}?stream=true&starting_after=N`, with the official client's
 * `responses.retrieve(id, { stream: true, starting_after })`. Whatever the moment the client went
 * away and came back, the events it got make the whole stream once, in order.
 */

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/** Slow enough that a response is still running when its client comes back. */
const DECODE_MS = 60;
const TOKENS = 40;
const ask = {
  model: 'm',
  input: 'Tell me about kilns.',
  max_output_tokens: TOKENS,
  background: true,
  stream: true,
} as const;

/** The first `n` events, then the connection goes away; each held to OpenAI's schema for its type. */
const firstEvents = (stream: AsyncIterable<StreamEvent>, n: number) => takeEvents(stream, n);
const allEvents = (stream: AsyncIterable<StreamEvent>) => takeEvents(stream);

/** The events are the whole stream, 0 to its terminal event; answers the final response. */
function expectWhole(events: StreamEvent[]): OpenAI.Responses.Response {
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  expect(events[0]?.type).toBe('response.created');
  const end = events.at(-1);
  expect(end?.type).toBe('response.incomplete');
  const response = (end as OpenAI.Responses.ResponseIncompleteEvent).response;
  const deltas = events.filter((e) => e.type === 'response.output_text.delta');
  expect(deltas).toHaveLength(TOKENS);
  expect(response.output_text).toBe(deltas.map((e) => e.delta).join(''));
  expect(response.output_text.length).toBeGreaterThan(0);
  return response;
}

describe.each(storeCases)('resuming a background response stream ($name)', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1, { decodeMsPerToken: DECODE_MS });
    kiln = await startTestServer(storeCase, { engines: { pool: engine('unique', sims) } });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it.skipIf(storeCase.skip)(
    'a client that went away mid-stream resumes after its last event, live, with no gap or repeat',
    async () => {
      const before = await firstEvents(await client.responses.create(ask), 8);
      const id = (before[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
      const lastSeen = before.at(-1)?.sequence_number as number;
      expect(lastSeen).toBe(7);
      // Going away left the response running.
      expect((await client.responses.retrieve(id)).status).toBe('in_progress');

      const after = await allEvents(
        await client.responses.retrieve(id, { stream: true, starting_after: lastSeen }),
      );
      expect(after[0]?.sequence_number).toBe(lastSeen + 1);
      const response = expectWhole([...before, ...after]);
      const stored = await client.responses.retrieve(id);
      expect(stored).toMatchObject({ id, status: 'incomplete', background: true });
      expect(stored.output_text).toBe(response.output_text);
    },
  );

  it.skipIf(storeCase.skip)(
    'several comebacks: each resumes where the last stopped, and the stream streams whole again',
    async () => {
      const events = await firstEvents(await client.responses.create(ask), 3);
      const id = (events[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
      for (const n of [1, 5, 2, 9]) {
        const more = await firstEvents(
          await client.responses.retrieve(id, {
            stream: true,
            starting_after: events.at(-1)?.sequence_number,
          }),
          n,
        );
        events.push(...more);
      }
      events.push(
        ...(await allEvents(
          await client.responses.retrieve(id, {
            stream: true,
            starting_after: events.at(-1)?.sequence_number,
          }),
        )),
      );
      const response = expectWhole(events);
      // Without starting_after, a finished response's stream is every event, the same ones.
      const again = await allEvents(await client.responses.retrieve(id, { stream: true }));
      expect(again).toEqual(events);
      expect(response.status).toBe('incomplete');
    },
  );

  it.skipIf(storeCase.skip)(
    'a caller with a per-minute limit gets its x-ratelimit headers on a resumed stream, as on every answer',
    async () => {
      const org = `org-${Math.random().toString(36).slice(2)}`;
      await kiln.call('POST', '/admin/v1/orgs', { body: { name: org } });
      const { key } = (
        await kiln.call('POST', '/admin/v1/keys', { body: { org, limits: { requests_per_minute: 100 } } })
      ).body;
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
      const created = await fetch(`${kiln.url}/v1/responses`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ ...ask, max_output_tokens: 2 }),
      });
      expect(created.headers.get('x-ratelimit-limit-requests')).toBe('100');
      const id = /"id":"(resp_[^"]+)"/.exec(await created.text())?.[1];
      const resumed = await fetch(`${kiln.url}/v1/responses/${id}?stream=true`, { headers });
      expect(resumed.status).toBe(200);
      expect(resumed.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(resumed.headers.get('x-ratelimit-limit-requests')).toBe('100');
      expect(Number(resumed.headers.get('x-ratelimit-remaining-requests'))).toBeLessThan(100);
      expect(await resumed.text()).toContain('response.incomplete');
    },
  );

  it.skipIf(storeCase.skip)(
    'a finished response: its events after N, and after the last one nothing at all',
    async () => {
      const whole = await allEvents(await client.responses.create(ask));
      expectWhole(whole);
      const id = (whole[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
      const last = whole.at(-1)?.sequence_number as number;
      // At once, the moment the stream has ended: the log already holds its last events.
      expect(
        await allEvents(await client.responses.retrieve(id, { stream: true, starting_after: 3 })),
      ).toEqual(whole.slice(4));

      const tail = await allEvents(await client.responses.retrieve(id, { stream: true, starting_after: 30 }));
      expect(tail).toEqual(whole.slice(31));
      for (const after of [last, last + 10]) {
        const response = await fetch(`${kiln.url}/v1/responses/${id}?stream=true&starting_after=${after}`, {
          headers: { authorization: `Bearer ${kiln.adminKey}` },
        });
        expect(response.status).toBe(200);
        expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
        expect(await response.text()).toBe('');
      }
    },
  );

  it.skipIf(storeCase.skip)(
    'a response cancelled mid-stream ends its resumed stream with an error event numbered next',
    async () => {
      const before = await firstEvents(await client.responses.create(ask), 6);
      const id = (before[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
      expect((await client.responses.cancel(id)).status).toBe('cancelled');

      const after = await allEvents(await client.responses.retrieve(id, { stream: true, starting_after: 5 }));
      const events = [...before, ...after];
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
      expect(events.slice(0, -1).every((e) => e.type !== 'error')).toBe(true);
      expect(events.at(-1)).toMatchObject({ type: 'error', code: 'cancelled' });
      expect(events.filter((e) => e.type === 'response.output_text.delta').length).toBeLessThan(TOKENS);
    },
  );

  it.skipIf(storeCase.skip)(
    'cancelled while a client reads it live, it streams again exactly as that client saw it',
    async () => {
      // The cancel comes the moment an event arrives: that event, just published, is still on its
      // way to the log (which batches), and the cancel ends the job before it gets there.
      const live: StreamEvent[] = [];
      let cancelled: Promise<OpenAI.Responses.Response> | undefined;
      for await (const event of await client.responses.create(ask)) {
        live.push(event);
        if (live.length === 10) {
          const id = (live[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
          cancelled = client.responses.cancel(id);
        }
      }
      expect((await cancelled)?.status).toBe('cancelled');
      expect(live.at(-1)).toMatchObject({ type: 'error', code: 'cancelled' });
      const id = (live[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;

      const again = await allEvents(
        await client.responses.retrieve(id, { stream: true, starting_after: -1 }),
      );
      const shape = (events: StreamEvent[]) =>
        events.map((e) => `${e.sequence_number} ${e.type} ${'delta' in e ? e.delta : ''}`);
      expect(shape(again)).toEqual(shape(live));
      // A client that had the first events resumes onto the same end.
      const rest = await allEvents(await client.responses.retrieve(id, { stream: true, starting_after: 8 }));
      expect(shape(rest)).toEqual(shape(live.slice(9)));
    },
  );

  it.skipIf(storeCase.skip)(
    'only a background response created streaming streams again; another organisation’s is not found',
    async () => {
      const foreground = await client.responses.create({ model: 'm', input: 'Hi.', max_output_tokens: 3 });
      const background = await client.responses.create({
        model: 'm',
        input: 'Hi.',
        max_output_tokens: 3,
        background: true,
      });
      for (const id of [foreground.id, background.id]) {
        const refused = await kiln.call('GET', `/v1/responses/${id}?stream=true`);
        expect(refused.status).toBe(400);
        expect(refused.body.error.param ?? refused.body.error.details?.[0]?.field).toBe('stream');
        expect(JSON.stringify(refused.body)).toMatch(/background: true and stream: true/);
        // Without stream, the same response is retrieved as always.
        expect((await kiln.call('GET', `/v1/responses/${id}`)).status).toBe(200);
      }

      const streamed = await allEvents(await client.responses.create({ ...ask, max_output_tokens: 3 }));
      const id = (streamed[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
      const stranger = await kiln.key('globex');
      const refused = await kiln.call('GET', `/v1/responses/${id}?stream=true`, { key: stranger });
      expect(refused.status).toBe(404);
      expect(JSON.stringify(refused.body)).not.toContain('output_text');
      expect((await kiln.call('GET', `/v1/responses/${id}?stream=true`)).status).toBe(200);

      // A deleted response keeps no events either.
      const jobId = id.slice('resp_'.length);
      expect(await kiln.server.store.responseEvents.last(jobId)).toBeDefined();
      await client.responses.delete(id);
      expect(await kiln.server.store.responseEvents.last(jobId)).toBeUndefined();
      expect((await kiln.call('GET', `/v1/responses/${id}?stream=true`)).status).toBe(404);
    },
  );
});

const postgres = storeCases[1] as (typeof storeCases)[number];

describe.skipIf(postgres.skip)(`resuming through another gateway process: ${caseTitle(postgres)}`, () => {
  let first: TestServer;
  let sims: LlmSim[];
  let otherDir: string;
  let otherUrl: string;

  beforeAll(async () => {
    sims = await simPool(1, { decodeMsPerToken: DECODE_MS });
    const fleet = { engines: { pool: engine('unique', sims) } };
    first = await startTestServer(postgres, fleet);
    // A gateway with no workers of its own, on the same schema: it serves requests, never runs a job.
    otherDir = mkdtempSync(path.join(tmpdir(), 'kiln-resume-gateway-'));
    const config = path.join(otherDir, 'kiln.yaml');
    writeFileSync(config, JSON.stringify(fleet));
    const other = await startServerProcess({
      KILN_CONFIG: config,
      KILN_DATA_DIR: otherDir,
      KILN_PORT: '0',
      KILN_STORE_URL: first.server.runtime.config.store.url,
      KILN_STORE_SCHEMA: first.server.runtime.config.store.schema,
      KILN_JOBS_WORKERS: '0',
      KILN_LOG_LEVEL: 'info',
    });
    otherUrl = other.url;
  });
  afterAll(async () => {
    await killAll();
    await first?.close();
    await closeAll(sims ?? []);
    if (otherDir) rmSync(otherDir, { recursive: true, force: true });
  });

  it('a stream the first gateway runs resumes whole on the second, live and after it finished', async () => {
    const one = new OpenAI({ baseURL: `${first.url}/v1`, apiKey: first.adminKey, maxRetries: 0 });
    const two = new OpenAI({ baseURL: `${otherUrl}/v1`, apiKey: first.adminKey, maxRetries: 0 });

    const before = await firstEvents(await one.responses.create(ask), 5);
    const id = (before[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
    expect((await two.responses.retrieve(id)).status).toBe('in_progress');
    const after = await allEvents(
      await two.responses.retrieve(id, { stream: true, starting_after: before.at(-1)?.sequence_number }),
    );
    const events = [...before, ...after];
    const response = expectWhole(events);
    expect((await one.responses.retrieve(id)).output_text).toBe(response.output_text);

    // Once it is over, the second gateway streams it all again from the store.
    expect(await allEvents(await two.responses.retrieve(id, { stream: true }))).toEqual(events);
    // And a client that went away on the second gateway comes back on the first.
    const partial = await firstEvents(
      await two.responses.retrieve(id, { stream: true, starting_after: 10 }),
      4,
    );
    const rest = await allEvents(await one.responses.retrieve(id, { stream: true, starting_after: 14 }));
    expect([...events.slice(0, 11), ...partial, ...rest]).toEqual(events);
  });
});

describe('the event log writer', () => {
  let store: Store;
  let close: () => Promise<void>;
  let jobId: string;
  /** Every INSERT the writer makes, by its events' sequence numbers. */
  let inserts: number[][];
  let failures: number;

  beforeEach(async () => {
    ({ store, close } = await freshStore(storeCases[0] as (typeof storeCases)[number]));
    const org = await store.orgs.create('acme');
    jobId = await insertJob(store, org?.id as string, { kind: 'response', running: true });
    inserts = [];
    failures = 0;
    const append = store.responseEvents.append.bind(store.responseEvents);
    store.responseEvents.append = async (id: string, attempt: number, events: readonly PublishedEvent[]) => {
      if (failures > 0) {
        failures--;
        throw new Error('the store is away');
      }
      inserts.push(events.map((e) => e.seq));
      return append(id, attempt, events);
    };
  });
  afterEach(async () => close());

  const event = (seq: number) => ({
    seq,
    data: `event: response.output_text.delta\ndata: {"sequence_number":${seq}}\n\n`,
  });
  const logged = async () => (await store.responseEvents.after(jobId, -1, 1000)).map((e) => e.seq);
  const range = (n: number) => Array.from({ length: n }, (_, i) => i);

  it('a burst is a few INSERTs of many events; close stores the rest before it answers', async () => {
    const log = new ResponseLog(store, jobId, 1);
    for (const seq of range(150)) log.add(seq, event(seq).data);
    await log.close();
    expect(inserts.map((batch) => batch.length)).toEqual([64, 64, 22]);
    expect(await logged()).toEqual(range(150));
  });

  it('tokens a few milliseconds apart share an INSERT: never one per token', async () => {
    const log = new ResponseLog(store, jobId, 1);
    for (const seq of range(60)) {
      log.add(seq, event(seq).data);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await log.close();
    expect(inserts.flat()).toEqual(range(60));
    expect(inserts.length).toBeLessThanOrEqual(12);
    expect(await logged()).toEqual(range(60));
  });

  it('a write the store refused goes again with the next; close throws only if the store still refuses', async () => {
    const log = new ResponseLog(store, jobId, 1, { flushMs: 5 });
    failures = 1;
    for (const seq of range(10)) log.add(seq, event(seq).data);
    await log.close();
    expect(await logged()).toEqual(range(10));

    const failing = new ResponseLog(store, jobId, 1, { flushMs: 5 });
    failing.add(10, event(10).data);
    failures = 100;
    await expect(failing.close()).rejects.toThrow(/could not be stored: the store is away/);
  });

  it('a new run of the job starts the log afresh, even a run that stores no event', async () => {
    const first = new ResponseLog(store, jobId, 1);
    for (const seq of range(20)) first.add(seq, event(seq).data);
    await first.close();
    // The worker stops and hands the job back; it runs again as the same attempt.
    expect(await store.jobs.release('w1', Date.now())).toBe(1);
    const again = await store.jobs.claimNext('w2', ['response'], Date.now(), Date.now() + 60_000);
    expect(again?.attempts).toBe(1);
    const second = new ResponseLog(store, jobId, 1);
    for (const seq of range(3)) second.add(seq, `${event(seq).data}again`);
    await second.close();
    const rows = await store.responseEvents.after(jobId, -1, 100);
    expect(rows.map((e) => e.seq)).toEqual(range(3));
    expect(rows.every((e) => e.data.endsWith('again'))).toBe(true);

    await new ResponseLog(store, jobId, 1).close();
    expect(await logged()).toEqual([]);
  });
});
