import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import type { Admission } from '../../src/store/repos/admissions.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

const DAY = 86_400_000;

/**
 * Budgets sum a caller's daily totals plus its latest admissions; folding admissions into totals
 * must never change a budget's figure, whatever is held, settled late or spread over days.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`admission totals: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    const now = Date.UTC(2026, 10, 23, 12, 0, 0);
    const periods = { day: Date.UTC(2026, 10, 23), month: Date.UTC(2026, 10, 1) };
    let n = 0;

    beforeEach(async () => {
      ({ store, close } = await freshStore(storeCase));
    });
    afterEach(async () => close());

    const admit = (row: Partial<Admission> & { created_at: number; tokens: number }) =>
      store.admissions.insert({
        job_id: `job-${n++}`,
        key_id: 'key_a',
        org_id: 'org_a',
        media_ms: 0,
        held: 0,
        ...row,
      });

    it('folding keeps the day and month figures, for the key and its organisation, and a held admission waits', async () => {
      await admit({ created_at: periods.month - 1000, tokens: 1 }); // last month: in neither
      await admit({ created_at: periods.month + 1000, tokens: 10 }); // this month
      await admit({ created_at: periods.day - DAY + 5, tokens: 100, media_ms: 7000 }); // yesterday
      await admit({ created_at: periods.day + 5, tokens: 1000, media_ms: 3000 }); // today
      await admit({ job_id: 'held', created_at: now - 3_600_000, tokens: 50_000, held: 1 }); // running for an hour
      await admit({ created_at: now - 1000, tokens: 20_000 }); // a second ago
      const expected = { day_tokens: 71_000, day_media_ms: 3000, month_tokens: 71_110 };
      expect(await store.admissions.totals('key', 'key_a', periods)).toEqual(expected);

      // Folding stops at the held admission: the ones before it go into totals; figures do not move.
      const stood = await store.admissions.fold('key', 'key_a', now - 60_000);
      expect(stood).toBe(now - 3_600_000);
      expect(await store.admissions.fold('org', 'org_a', now - 60_000)).toBe(now - 3_600_000);
      expect(await store.admissions.totals('key', 'key_a', periods)).toEqual(expected);
      expect(await store.admissions.totals('org', 'org_a', periods)).toEqual(expected);

      // The held job ends having used 40 tokens: the figures follow, and a fold takes it in.
      expect(await store.admissions.settle('held', { tokens: 40, media_ms: 0 })).toBe(true);
      const settled = { ...expected, day_tokens: 21_040, month_tokens: 21_150 };
      expect(await store.admissions.totals('key', 'key_a', periods)).toEqual(settled);
      expect(await store.admissions.fold('key', 'key_a', now - 60_000)).toBe(now - 60_000);
      expect(await store.admissions.totals('key', 'key_a', periods)).toEqual(settled);
      // A second fold with nothing new changes nothing.
      await store.admissions.fold('key', 'key_a', now - 60_000);
      expect(await store.admissions.totals('key', 'key_a', periods)).toEqual(settled);
      // Admissions after the fold are counted live.
      await admit({ created_at: now, tokens: 5 });
      expect((await store.admissions.totals('key', 'key_a', periods)).day_tokens).toBe(21_045);
      // Another key's admissions are not this key's.
      await admit({ key_id: 'key_b', created_at: now, tokens: 9 });
      expect((await store.admissions.totals('key', 'key_a', periods)).day_tokens).toBe(21_045);
      expect((await store.admissions.totals('org', 'org_a', periods)).day_tokens).toBe(21_054);
    });

    it('a stopped stream settles at what it relayed, or at its reservation where the estimate is more', async () => {
      await admit({ job_id: 'short', created_at: now, tokens: 306, media_ms: 0, held: 1 });
      await admit({ job_id: 'long', created_at: now, tokens: 11, media_ms: 0, held: 1 });
      const capped = { atMostReserved: true };
      expect(await store.admissions.settle('short', { tokens: 19, media_ms: 0 }, capped)).toBe(true);
      expect(await store.admissions.settle('long', { tokens: 14, media_ms: 0 }, capped)).toBe(true);
      expect(await store.admissions.get('short')).toMatchObject({ held: 0, tokens: 19 });
      expect(await store.admissions.get('long')).toMatchObject({ held: 0, tokens: 11 });
      // Settled once: a second settle changes nothing.
      expect(await store.admissions.settle('short', { tokens: 1, media_ms: 0 }, capped)).toBe(false);
      expect((await store.admissions.totals('key', 'key_a', periods)).day_tokens).toBe(30);
    });
  });
}
