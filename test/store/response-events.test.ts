import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import { insertJob } from '../helpers/jobs.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

/** The response event log's statements, the same on every store. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`response event log: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let orgId: string;

    beforeEach(async () => {
      ({ store, close } = await freshStore(storeCase));
      orgId = (await store.orgs.create('acme'))?.id as string;
    });
    afterEach(async () => close());

    /** A response job in its first run, leased to `w1`, or queued. */
    const job = (running = true) => insertJob(store, orgId, { kind: 'response', running });
    const events = (from: number, to: number) =>
      Array.from({ length: to - from + 1 }, (_, i) => ({
        seq: from + i,
        data: `event: response.output_text.delta\ndata: {"delta":"é ${from + i} 🔥","sequence_number":${from + i}}\n\n`,
      }));
    /** The same events as a run hands them to the log: with when it published them. */
    const published = (from: number, to: number, at = Date.now()) =>
      events(from, to).map((event) => ({ ...event, at }));

    it('keeps events in order and answers them after a sequence number, a page at a time', async () => {
      const id = await job();
      const other = await job();
      expect(await store.responseEvents.last(id)).toBeUndefined();
      expect(await store.responseEvents.after(id, -1, 10)).toEqual([]);
      // Batches of every size a writer makes, out of order, one larger than a statement holds.
      expect(await store.responseEvents.append(id, 1, published(0, 0))).toBe(1);
      expect(await store.responseEvents.append(id, 1, published(4, 6))).toBe(3);
      expect(await store.responseEvents.append(id, 1, published(1, 3))).toBe(3);
      expect(await store.responseEvents.append(id, 1, published(7, 156))).toBe(150);
      await store.responseEvents.append(other, 1, published(0, 2));

      expect(await store.responseEvents.after(id, -1, 1000)).toEqual(events(0, 156));
      expect(await store.responseEvents.after(id, 4, 3)).toEqual(events(5, 7));
      expect(await store.responseEvents.after(id, 156, 10)).toEqual([]);
      expect(await store.responseEvents.last(id)).toEqual(events(156, 156)[0]);
      expect(await store.responseEvents.after(other, -1, 10)).toEqual(events(0, 2));
    });

    it('an event already logged is kept as it was', async () => {
      const id = await job();
      await store.responseEvents.append(id, 1, published(0, 2));
      const again = published(1, 3).map((e) => ({ ...e, data: `${e.data}again` }));
      expect(await store.responseEvents.append(id, 1, again)).toBe(1);
      const logged = await store.responseEvents.after(id, -1, 10);
      expect(logged.map((e) => e.data.endsWith('again'))).toEqual([false, false, false, true]);
    });

    it('only the run that holds the job appends: not a queued job, nor an earlier attempt; once it is cancelled, what it published before the cancel', async () => {
      const queued = await job(false);
      expect(await store.responseEvents.append(queued, 0, published(0, 1))).toBe(0);
      expect(await store.responseEvents.append(queued, 1, published(0, 1))).toBe(0);

      const id = await job();
      expect(await store.responseEvents.append(id, 2, published(0, 1))).toBe(0);
      expect(await store.responseEvents.append(id, 1, published(0, 1))).toBe(2);
      const cancelledAt = Date.now();
      await store.jobs.finish(
        id,
        { by: 'cancel', orgId },
        { status: 'cancelled', error: { code: 'cancelled', message: 'cancelled' } },
        cancelledAt,
        60_000,
      );
      // Published before the cancel, still on its way to the log when it came: live readers had it.
      expect(await store.responseEvents.append(id, 1, published(2, 3, cancelledAt - 5))).toBe(2);
      // Published after it, by a run that had not heard of it yet: nobody was sent these.
      expect(await store.responseEvents.append(id, 1, published(4, 5, cancelledAt + 5))).toBe(0);
      expect(await store.responseEvents.append(id, 2, published(4, 4, cancelledAt - 5))).toBe(0);
      expect((await store.responseEvents.after(id, -1, 10)).map((e) => e.seq)).toEqual([0, 1, 2, 3]);
      expect((await store.responseEvents.after(queued, -1, 10)).map((e) => e.seq)).toEqual([]);

      // A run given back to the queue, the job then cancelled while queued: that run's events stay out.
      const released = await job();
      expect(await store.responseEvents.append(released, 1, published(0, 0))).toBe(1);
      expect(await store.jobs.release('w1', Date.now())).toBe(1);
      const later = Date.now();
      await store.jobs.finish(
        released,
        { by: 'cancel', orgId },
        { status: 'cancelled', error: { code: 'cancelled', message: 'cancelled' } },
        later,
        60_000,
      );
      expect(await store.responseEvents.append(released, 1, published(1, 1, later - 5))).toBe(0);
      expect((await store.responseEvents.after(released, -1, 10)).map((e) => e.seq)).toEqual([0]);
    });

    it('clearing a log empties it for that job alone', async () => {
      const id = await job();
      const other = await job();
      await store.responseEvents.append(id, 1, published(0, 4));
      await store.responseEvents.append(other, 1, published(0, 1));
      expect(await store.responseEvents.clear(id)).toBe(5);
      expect(await store.responseEvents.last(id)).toBeUndefined();
      expect(await store.responseEvents.append(id, 1, published(0, 0))).toBe(1);
      expect((await store.responseEvents.after(other, -1, 10)).map((e) => e.seq)).toEqual([0, 1]);
    });
  });
}
