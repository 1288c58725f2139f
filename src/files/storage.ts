import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { KilnError } from '../errors.js';

/** A byte range, both ends included (as in HTTP's `bytes=start-end`). */
export interface ByteRange {
  start: number;
  end: number;
}

/**
 * Where produced files' bytes live. Keys are names Kiln generates (`ab/file_…`), never user input.
 * The local directory is the first implementation; an object store can follow behind the same methods.
 */
export interface FileStorage {
  /** Stores the whole object at once: readers see all of it or nothing. */
  put(key: string, data: Buffer): Promise<void>;
  /** The object's size in bytes, or undefined when there is no such object. */
  stat(key: string): Promise<number | undefined>;
  /** A stream of the object (or of `range` of it); a missing object is a 404 `not-found`. */
  read(key: string, range?: ByteRange): Promise<Readable>;
  /** Removes the object; removing a missing one is not an error. */
  delete(key: string): Promise<void>;
  /** The object's path on this machine's disk, when storage is a local directory (tools such as ffprobe read it there). */
  localPath?(key: string): string;
  /** The keys of objects last written before `before` (Unix ms), for the purge's sweep of orphans. */
  writtenBefore?(before: number): AsyncIterable<string>;
}

const SAFE_KEY = /^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/;

/** Objects as files under one directory; each write lands whole, through a temporary file and a rename. */
export class LocalFileStorage implements FileStorage {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = path.resolve(dir);
  }

  localPath(key: string): string {
    // Keys are generated, but a bad one must never reach outside the directory.
    if (!SAFE_KEY.test(key))
      throw new KilnError('internal-error', `not a storage key: ${JSON.stringify(key)}`);
    return path.join(this.dir, key);
  }

  async put(key: string, data: Buffer): Promise<void> {
    const target = this.localPath(key);
    await mkdir(path.dirname(target), { recursive: true });
    const temporary = `${target}.${randomBytes(6).toString('hex')}.tmp`;
    const handle = await open(temporary, 'wx', 0o600);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } catch (error) {
      await handle.close().catch(() => undefined);
      await rm(temporary, { force: true });
      throw error;
    }
    await handle.close();
    await rename(temporary, target);
  }

  async stat(key: string): Promise<number | undefined> {
    try {
      return (await stat(this.localPath(key))).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  /** Opens the file before answering, so a missing one fails here and not halfway through a response. */
  async read(key: string, range?: ByteRange): Promise<Readable> {
    let handle: Awaited<ReturnType<typeof open>>;
    try {
      handle = await open(this.localPath(key), 'r');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new KilnError('not-found', 'the content of this file is no longer stored', { cause: error });
      }
      throw error;
    }
    return handle.createReadStream(range ? { start: range.start, end: range.end } : {});
  }

  async delete(key: string): Promise<void> {
    await rm(this.localPath(key), { force: true });
  }

  /** Shard by shard (`ab/`), the files last written before `before`; temporaries are not keys. */
  async *writtenBefore(before: number): AsyncGenerator<string> {
    const entries = async (dir: string) => {
      try {
        return await readdir(dir, { withFileTypes: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw error;
      }
    };
    for (const shard of await entries(this.dir)) {
      if (!shard.isDirectory()) continue;
      for (const entry of await entries(path.join(this.dir, shard.name))) {
        const key = `${shard.name}/${entry.name}`;
        if (!entry.isFile() || !SAFE_KEY.test(key)) continue;
        const written = await stat(path.join(this.dir, key)).then(
          (stats) => stats.mtimeMs,
          () => undefined,
        );
        if (written !== undefined && written < before) yield key;
      }
    }
  }
}
