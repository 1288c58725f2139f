import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { text } from 'node:stream/consumers';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalFileStorage } from '../../src/files/storage.js';

describe('local file storage', () => {
  let dir: string;
  let storage: LocalFileStorage;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-storage-'));
    storage = new LocalFileStorage(path.join(dir, 'files'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('stores, sizes, reads whole or in part, replaces and deletes an object', async () => {
    await storage.put('ab/file_x', Buffer.from('hello, world'));
    expect(await storage.stat('ab/file_x')).toBe(12);
    expect(await text(await storage.read('ab/file_x'))).toBe('hello, world');
    expect(await text(await storage.read('ab/file_x', { start: 7, end: 11 }))).toBe('world');
    await storage.put('ab/file_x', Buffer.from('bye'));
    expect(await text(await storage.read('ab/file_x'))).toBe('bye');
    // Written through a temporary file and renamed: nothing else is left in the directory.
    expect(readdirSync(path.join(dir, 'files', 'ab'))).toEqual(['file_x']);
    await storage.delete('ab/file_x');
    await storage.delete('ab/file_x');
    expect(await storage.stat('ab/file_x')).toBeUndefined();
  });

  it('answers a missing object with not-found when it is opened, not mid-stream', async () => {
    await expect(storage.read('ab/file_gone')).rejects.toMatchObject({ code: 'not-found', status: 404 });
  });

  it('never resolves a key outside its directory', async () => {
    for (const key of ['../escape', '/etc/passwd', 'a/../../b', 'a//b', '', 'a/b.tmp']) {
      await expect(storage.put(key, Buffer.from('x'))).rejects.toMatchObject({ code: 'internal-error' });
    }
    expect(readdirSync(dir)).toEqual([]);
  });
});
