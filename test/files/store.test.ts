import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import type { FileRow } from '../../src/store/repos/files.js';
import { caseTitle, freshStore, storeCases } from '../helpers/stores.js';

/** The files and settings repositories: the same suite on every store. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`files and settings repositories: ${caseTitle(storeCase)}`, () => {
    let store: Store;
    let close: () => Promise<void>;
    let orgA: string;
    let orgB: string;

    beforeEach(async () => {
      ({ store, close } = await freshStore(storeCase));
      orgA = (await store.orgs.create('acme'))?.id as string;
      orgB = (await store.orgs.create('globex'))?.id as string;
    });
    afterEach(async () => close());

    const row = (id: string, orgId: string, extra: Partial<FileRow> = {}): FileRow => ({
      id,
      org_id: orgId,
      job_id: 'job_1',
      content_type: 'video/webm',
      size_bytes: 5_000_000_000, // beyond 32 bits: BIGINT on both stores
      sha256: 'a'.repeat(64),
      storage_key: `ab/${id}`,
      width: 1280,
      height: 704,
      duration_ms: 4000,
      fps: 30000 / 1001,
      created_at: 1_750_000_000_123,
      ...extra,
    });

    it('keeps a file row for its organisation only, numbers intact', async () => {
      const inserted = await store.files.insert(row('file_1', orgA));
      expect(inserted).toEqual({ ...row('file_1', orgA), fps: 29.97 });
      expect(await store.files.get(orgA, 'file_1')).toEqual(inserted);
      expect(await store.files.get(orgB, 'file_1')).toBeUndefined();
      expect(await store.files.get(orgA, 'file_unknown')).toBeUndefined();
      expect(await store.files.find('file_1')).toEqual(inserted);
    });

    it('keeps null media fields for files that are not media', async () => {
      const plain = row('file_2', orgA, {
        content_type: 'application/json',
        job_id: null,
        width: null,
        height: null,
        duration_ms: null,
        fps: null,
      });
      expect(await store.files.insert(plain)).toEqual(plain);
    });

    it("lists a job's files in creation order and deletes one for its organisation only", async () => {
      await store.files.insert(row('file_b', orgA));
      await store.files.insert(row('file_a', orgA));
      await store.files.insert(row('file_c', orgA, { job_id: 'job_2' }));
      expect((await store.files.byJob(orgA, 'job_1')).map((f) => f.id)).toEqual(['file_a', 'file_b']);
      expect(await store.files.byJob(orgB, 'job_1')).toEqual([]);
      expect(await store.files.delete(orgB, 'file_a')).toBeUndefined();
      expect((await store.files.delete(orgA, 'file_a'))?.storage_key).toBe('ab/file_a');
      expect(await store.files.find('file_a')).toBeUndefined();
    });

    it('a setting is stored once: racing writers all read the first value', async () => {
      expect(await store.settings.get('x')).toBeUndefined();
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) => store.settings.ensure('x', `value-${i}`)),
      );
      expect(new Set(answers).size).toBe(1);
      expect(await store.settings.get('x')).toBe(answers[0]);
      expect(await store.settings.ensure('x', 'later')).toBe(answers[0]);
    });
  });
}
