import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { FileService, URL_SECRET_SETTING } from '../../src/files/service.js';
import { LocalFileStorage } from '../../src/files/storage.js';
import { openStore, type Store } from '../../src/store/index.js';
import { caseTitle, storeCases } from '../helpers/stores.js';
import { makePng, makeWebm } from './media.js';

let work: string;
let webm: Buffer;
let png: Buffer;

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'kiln-files-'));
  webm = await makeWebm(work);
  png = await makePng();
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

const PUBLIC = 'https://kiln.example.com';

/** Produced files and signed URLs, on every store. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`file service: ${caseTitle(storeCase)}`, () => {
    let config: Config;
    let cleanup: () => Promise<void>;
    let store: Store;
    let files: FileService;
    let orgA: string;
    let orgB: string;
    let dataDir: string;

    beforeEach(async () => {
      const fresh = storeCase.fresh();
      cleanup = fresh.cleanup;
      dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-data-'));
      config = loadConfig({
        env: {},
        overrides: { data_dir: dataDir, 'store.url': fresh.store.url, 'store.schema': fresh.store.schema },
      });
      store = openStore(config.store);
      await store.migrate();
      orgA = (await store.orgs.create('acme'))?.id as string;
      orgB = (await store.orgs.create('globex'))?.id as string;
      files = await FileService.create(store, config, () => PUBLIC);
    });
    afterEach(async () => {
      await store.close();
      await cleanup();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it('measures a saved video from its bytes and keeps it under <data_dir>/files', async () => {
      const file = await files.save({ orgId: orgA, jobId: 'job_1', data: webm, contentType: 'video/webm' });
      expect(file).toEqual({
        id: expect.stringMatching(/^file_[0-9a-f]{32}$/),
        object: 'file',
        content_type: 'video/webm',
        size_bytes: webm.length,
        sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
        width: 320,
        height: 240,
        duration_ms: 2000,
        fps: 24,
        created_at: expect.any(Number),
        job_id: 'job_1',
      });
      expect(Math.abs(file.created_at - Date.now() / 1000)).toBeLessThan(60);
      const row = await files.get(orgA, file.id);
      const stored = path.join(dataDir, 'files', row.storage_key);
      expect(readdirSync(path.dirname(stored))).toEqual([file.id]); // no temporary file left behind
      const chunks: Buffer[] = [];
      for await (const chunk of await files.content(row)) chunks.push(chunk as Buffer);
      expect(Buffer.concat(chunks).equals(webm)).toBe(true);
    });

    it('measures an image, and keeps other files without media fields', async () => {
      const image = await files.save({ orgId: orgA, jobId: null, data: png, contentType: 'image/png' });
      expect(image).toMatchObject({ width: 64, height: 48, duration_ms: null, fps: null, job_id: null });
      const json = await files.save({
        orgId: orgA,
        jobId: null,
        data: Buffer.from('{}'),
        contentType: 'application/json',
      });
      expect(json).toMatchObject({ size_bytes: 2, width: null, height: null, duration_ms: null, fps: null });
    });

    it('refuses a file that does not read as its type and keeps nothing of it', async () => {
      await expect(
        files.save({ orgId: orgA, jobId: null, data: Buffer.from('not a video'), contentType: 'video/mp4' }),
      ).rejects.toMatchObject({ code: 'inference-failed', message: expect.stringContaining('video/mp4') });
      await expect(
        files.save({ orgId: orgA, jobId: null, data: Buffer.from('not a png'), contentType: 'image/png' }),
      ).rejects.toMatchObject({ code: 'inference-failed' });
      const dir = path.join(dataDir, 'files');
      const left = readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
      expect(left).toEqual([]);
    });

    it('hides a file from other organisations: the same 404 as an unknown id', async () => {
      const file = await files.save({ orgId: orgA, jobId: null, data: png, contentType: 'image/png' });
      for (const [org, id] of [
        [orgB, file.id],
        [orgA, 'file_0123456789abcdef0123456789abcdef'],
        [orgA, '../../etc/passwd'],
      ] as const) {
        await expect(files.get(org, id)).rejects.toMatchObject({ code: 'not-found', status: 404 });
      }
    });

    it('signs URLs under the public URL that verify until they expire', async () => {
      const file = await files.save({ orgId: orgA, jobId: null, data: png, contentType: 'image/png' });
      const url = new URL(files.signedUrl(file));
      expect(url.origin + url.pathname).toBe(`${PUBLIC}/v1/files/${file.id}/content`);
      const expires = url.searchParams.get('expires') as string;
      const signature = url.searchParams.get('signature') as string;
      // files.url_ttl defaults to 24 h
      expect(Number(expires) - Date.now() / 1000).toBeGreaterThan(24 * 3600 - 60);
      expect(Number(expires) - Date.now() / 1000).toBeLessThanOrEqual(24 * 3600);
      expect(signature).toMatch(/^[0-9a-f]{64}$/);
      expect(files.verify(file.id, expires, signature)).toBe('valid');

      const flipped = `${signature.slice(0, -1)}${signature.endsWith('0') ? '1' : '0'}`;
      expect(files.verify(file.id, expires, flipped)).toBe('invalid');
      expect(files.verify(file.id, String(Number(expires) + 1), signature)).toBe('invalid');
      expect(files.verify('file_0123456789abcdef0123456789abcdef', expires, signature)).toBe('invalid');
      expect(files.verify(file.id, undefined, signature)).toBe('invalid');
      expect(files.verify(file.id, expires, ['a', 'b'])).toBe('invalid');

      const old = new URL(files.signedUrl(file, -60_000));
      expect(files.verify(file.id, old.searchParams.get('expires'), old.searchParams.get('signature'))).toBe(
        'expired',
      );
    });

    it('every process on one store signs with the same secret; another store has its own', async () => {
      const file = await files.save({ orgId: orgA, jobId: null, data: png, contentType: 'image/png' });
      // A second process: its own connection to the same database, its own file service.
      const again = openStore(config.store);
      try {
        const [second, third] = await Promise.all([
          FileService.create(again, config, () => PUBLIC),
          FileService.create(again, config, () => PUBLIC),
        ]);
        const url = new URL(files.signedUrl(file));
        const params = [url.searchParams.get('expires'), url.searchParams.get('signature')] as const;
        expect(second.verify(file.id, ...params)).toBe('valid');
        expect(third.verify(file.id, ...params)).toBe('valid');
        expect(second.signedUrl(file, 3_600_000)).toBe(files.signedUrl(file, 3_600_000));
      } finally {
        await again.close();
      }

      const other = storeCase.fresh();
      const otherStore = openStore(other.store);
      try {
        await otherStore.migrate();
        const foreign = await FileService.create(otherStore, config, () => PUBLIC);
        expect(await otherStore.settings.get(URL_SECRET_SETTING)).not.toBe(
          await store.settings.get(URL_SECRET_SETTING),
        );
        const url = new URL(files.signedUrl(file));
        expect(
          foreign.verify(file.id, url.searchParams.get('expires'), url.searchParams.get('signature')),
        ).toBe('invalid');
      } finally {
        await otherStore.close();
        await other.cleanup();
      }
    });
  });
}

describe('file service with storage that is not a local directory', () => {
  it('probes a temporary copy', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-remote-'));
    const local = new LocalFileStorage(path.join(dir, 'objects'));
    // Everything but localPath: as an object store would look.
    const remote = {
      put: local.put.bind(local),
      stat: local.stat.bind(local),
      read: local.read.bind(local),
      delete: local.delete.bind(local),
    };
    const config = loadConfig({ env: {}, overrides: { data_dir: dir } });
    const store = openStore(config.store);
    try {
      await store.migrate();
      const org = (await store.orgs.create('acme'))?.id as string;
      const files = await FileService.create(store, config, () => PUBLIC, remote);
      const file = await files.save({ orgId: org, jobId: null, data: webm, contentType: 'video/webm' });
      expect(file).toMatchObject({ width: 320, height: 240, duration_ms: 2000, fps: 24 });
      expect(await remote.stat((await files.get(org, file.id)).storage_key)).toBe(webm.length);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
