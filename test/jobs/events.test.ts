import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/ids.js';
import { type JobEvent, JobEvents } from '../../src/jobs/events.js';
import { openStore, type Store } from '../../src/store/index.js';
import type { PlanStep } from '../fixtures/job-events-publisher.js';
import { killAll, spawnKiln, waitUntil } from '../helpers/process.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

/**
 * Job events are how a stream's output, a cancellation or a job's end reach the process holding
 * the request. On PostgreSQL they cross processes through NOTIFY: here a real child process
 * publishes, and this process must hear every event of the job once, in order, byte for byte.
 */

const [sqlite, postgres] = storeCases as [(typeof storeCases)[0], (typeof storeCases)[0]];

const PUBLISHER = 'test/fixtures/job-events-publisher.ts';

/** One server-sent event's data, as a chat stream carries it. */
const chunk = (content: string) =>
  JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content } }] });

/**
 * 200 parts of one job: short ones, ones with quotes, backslashes and multi-byte text, one of about
 * 20,000 characters, and some around the size at which a part travels in pieces — among them pieces
 * that end between the two halves of a surrogate pair, and ones of three-byte characters only.
 */
function streamParts(): string[] {
  const parts: string[] = [];
  for (let i = 0; i < 200; i++) {
    if (i === 100) {
      parts.push(chunk('日本語のテキスト "quoted" \\ back\\slash 🔥 café — '.repeat(500)).slice(0, 20_000));
    } else if (i === 60) {
      // `{"c":"x` is 7 units: every 2400th unit from there on is the first half of an emoji.
      parts.push(`{"c":"x${'🔥'.repeat(5000)}"}`);
    } else if (i === 61) {
      parts.push('日'.repeat(2400 * 3 + 17));
    } else if (i === 62) {
      parts.push('a'.repeat(2400));
    } else if (i === 63) {
      parts.push('b'.repeat(2401));
    } else if (i === 64) {
      parts.push('\\"'.repeat(2400));
    } else if (i % 10 === 3) {
      parts.push(chunk(`part ${i}: "quoted", a \\ backslash, a\nnewline, 🚀 and 日本`));
    } else {
      parts.push(chunk(`part ${i} `));
    }
  }
  return parts;
}

describe('job events within one process (sqlite)', () => {
  it('publish delivers every event at once, in order, and never throws', async () => {
    const { store, close } = await freshStore(sqlite);
    const events = new JobEvents(store.driver);
    await events.start();
    const id = uuidv7();
    const heard: JobEvent[] = [];
    const everything: JobEvent[] = [];
    events.on(id, (event) => heard.push(event));
    events.on('*', (event) => everything.push(event));
    const parts = streamParts();
    try {
      for (const [i, data] of parts.entries()) {
        events.publish({ t: 'part', id, data, a: 1 });
        // Delivered before publish returns: a stream relays it in the same turn.
        expect(heard).toHaveLength(i + 1);
      }
      events.publish({ t: 'meta', id, meta: { route: 'r' } });
      events.publishLocal({ t: 'part', id, data: 'local', a: 1 });
      events.publish({ t: 'done', id });
      expect(heard.map((e) => (e.t === 'part' ? e.data : e.t))).toEqual([...parts, 'meta', 'local', 'done']);
      // '*' hears every job's events but parts.
      expect(everything.map((e) => e.t)).toEqual(['meta', 'done']);
      // Nothing is left to send: stopping is immediate.
      await events.stop();
    } finally {
      await close();
    }
    // Even with the store gone, publishing is an in-process call that cannot fail.
    expect(() => events.publish({ t: 'part', id, data: 'after close', a: 1 })).not.toThrow();
    expect(heard.at(-1)).toEqual({ t: 'part', id, data: 'after close', a: 1 });
  });
});

describe.skipIf(postgres.skip)(`job events across processes: ${caseTitle(postgres)}`, () => {
  let fresh: ReturnType<typeof postgres.fresh>;
  let store: Store;
  let events: JobEvents;
  let dir: string;

  beforeEach(async () => {
    fresh = postgres.fresh();
    store = openStore({ ...fresh.store, pool_size: 2 });
    await store.migrate();
    events = new JobEvents(store.driver);
    await events.start();
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-events-'));
  });
  afterEach(async () => {
    await killAll();
    await events.stop();
    await store.close();
    await fresh.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });
  afterAll(async () => {
    await killAll();
  });

  /** Runs the publisher child over `plan` and waits for it to finish; answers what its own listeners heard. */
  async function publishFromChild(plan: PlanStep[]): Promise<Record<string, string[]>> {
    const file = path.join(dir, 'plan.json');
    writeFileSync(file, JSON.stringify(plan));
    const child = spawnKiln(
      {
        KILN_STORE_URL: fresh.store.url,
        KILN_STORE_SCHEMA: fresh.store.schema,
        KILN_TEST_EVENTS_PLAN: file,
      },
      [],
      PUBLISHER,
    );
    const line = await child.waitForLine((l) => l.msg === 'published', 20_000);
    const exit = await child.exited;
    expect(exit.code, child.output()).toBe(0);
    return line.heard as Record<string, string[]>;
  }

  it('200 parts from another process arrive once each, in order, identical, then done', async () => {
    const job = uuidv7();
    const other = uuidv7();
    const parts = streamParts();
    const plan: PlanStep[] = [];
    const expected: string[] = [];
    const expectedOther: string[] = [];
    parts.forEach((data, i) => {
      plan.push({ op: 'publish', event: { t: 'part', id: job, data, a: 1 } });
      expected.push(data);
      // Another job's events interleaved, a meta and a progress among the parts.
      if (i % 50 === 10) {
        const data = chunk(`other job ${i}`);
        plan.push({ op: 'publish', event: { t: 'part', id: other, data, a: 1 } });
        expectedOther.push(data);
      }
      if (i === 0) {
        plan.push({
          op: 'publish',
          event: { t: 'meta', id: job, meta: { route: 'class=unique; engine=e' } },
        });
        expected.push('meta');
      }
      if (i === 150) {
        plan.push({ op: 'publish', event: { t: 'progress', id: job, progress: 0.75 } });
        expected.push('progress');
      }
      // Bursts within one batch, parts a turn apart, and parts after the batch window closed.
      if (i % 7 === 3) plan.push({ op: 'pause', ms: 0 });
      if (i % 25 === 24) plan.push({ op: 'pause', ms: 15 });
    });
    plan.push({ op: 'publish', event: { t: 'done', id: job } });
    plan.push({ op: 'publish', event: { t: 'done', id: other } });
    expected.push('done');
    expectedOther.push('done');

    const heard: JobEvent[] = [];
    const heardOther: JobEvent[] = [];
    const everything: JobEvent[] = [];
    events.on(job, (event) => heard.push(event));
    events.on(other, (event) => heardOther.push(event));
    events.on('*', (event) => everything.push(event));

    const childHeard = await publishFromChild(plan);
    await waitUntil(() => heard.some((e) => e.t === 'done') && heardOther.some((e) => e.t === 'done'), {
      timeoutMs: 10_000,
      describe: () => `done for both jobs (heard ${heard.length} events of ${expected.length})`,
    });

    const texts = (list: JobEvent[]) => list.map((e) => (e.t === 'part' ? e.data : e.t));
    const got = texts(heard);
    // Compared piece by piece first, so a failure names the first part that differs.
    expect(got.length).toBe(expected.length);
    for (const [i, text] of expected.entries()) expect(got[i], `event ${i}`).toBe(text);
    expect(got).toEqual(expected);
    expect(texts(heardOther)).toEqual(expectedOther);
    expect(heard.find((e) => e.t === 'meta')).toEqual({
      t: 'meta',
      id: job,
      meta: { route: 'class=unique; engine=e' },
    });
    expect(heard.find((e) => e.t === 'progress')).toEqual({ t: 'progress', id: job, progress: 0.75 });
    // '*' hears the other process's non-part events too.
    expect(everything.map((e) => `${e.t}:${e.id}`)).toEqual([
      `meta:${job}`,
      `progress:${job}`,
      `done:${job}`,
      `done:${other}`,
    ]);
    // The publisher's own listeners heard each event once: its notifications did not come back to it.
    expect(childHeard[job]).toEqual(expected);
    expect(childHeard[other]).toEqual(expectedOther);

    // Nothing more arrives later.
    await sleep(200);
    expect(heard).toHaveLength(expected.length);
  });

  it('a part published with publishLocal never leaves its process', async () => {
    const job = uuidv7();
    const plan: PlanStep[] = [
      { op: 'publishLocal', event: { t: 'part', id: job, data: chunk('local before'), a: 1 } },
      { op: 'publish', event: { t: 'part', id: job, data: chunk('shared 1'), a: 1 } },
      { op: 'publishLocal', event: { t: 'part', id: job, data: chunk('local in the same batch'), a: 1 } },
      { op: 'publish', event: { t: 'part', id: job, data: chunk('shared 2'), a: 1 } },
      { op: 'pause', ms: 20 },
      { op: 'publishLocal', event: { t: 'part', id: job, data: `{"c":"${'l'.repeat(6000)}"}`, a: 1 } },
      { op: 'pause', ms: 0 },
      { op: 'publish', event: { t: 'part', id: job, data: chunk('shared 3'), a: 1 } },
      { op: 'publishLocal', event: { t: 'part', id: job, data: chunk('local after'), a: 1 } },
      { op: 'publish', event: { t: 'done', id: job } },
      { op: 'publishLocal', event: { t: 'part', id: job, data: chunk('local after done'), a: 1 } },
    ];
    const heard: JobEvent[] = [];
    events.on(job, (event) => heard.push(event));

    const childHeard = await publishFromChild(plan);
    await waitUntil(() => heard.some((e) => e.t === 'done'), { timeoutMs: 10_000, describe: () => 'done' });
    await sleep(200);

    expect(heard.map((e) => (e.t === 'part' ? e.data : e.t))).toEqual([
      chunk('shared 1'),
      chunk('shared 2'),
      chunk('shared 3'),
      'done',
    ]);
    // In its own process, each local part was delivered, in order among the shared ones.
    expect(childHeard[job]).toEqual([
      chunk('local before'),
      chunk('shared 1'),
      chunk('local in the same batch'),
      chunk('shared 2'),
      `{"c":"${'l'.repeat(6000)}"}`,
      chunk('shared 3'),
      chunk('local after'),
      'done',
      chunk('local after done'),
    ]);
  });

  it('publishing on a store that is gone neither throws nor rejects', async () => {
    const gone = openStore({ ...fresh.store, pool_size: 1 });
    const local = new JobEvents(gone.driver);
    const id = uuidv7();
    const heard: string[] = [];
    local.on(id, (event) => heard.push(event.t));
    await gone.close();
    expect(() => {
      local.publish({ t: 'part', id, data: chunk('x'), a: 1 });
      local.publish({ t: 'done', id });
    }).not.toThrow();
    // Still delivered in this process; the failed notification is dropped, not an unhandled rejection.
    expect(heard).toEqual(['part', 'done']);
    await sleep(50);
    await local.stop();
  });
});
