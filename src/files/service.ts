import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { type Config, parseDuration } from '../config/schema.js';
import { KilnError, notFound } from '../errors.js';
import { uuidv7 } from '../ids.js';
import type { Store } from '../store/index.js';
import type { FileRow } from '../store/repos/files.js';
import { type MediaInfo, probeMedia } from './probe.js';
import { type ByteRange, type FileStorage, LocalFileStorage } from './storage.js';

/** A produced file as clients see it. */
export interface FileRecord {
  id: string;
  object: 'file';
  content_type: string;
  size_bytes: number;
  sha256: string;
  width: number | null;
  height: number | null;
  duration_ms: number | null;
  fps: number | null;
  /** Unix seconds. */
  created_at: number;
  job_id: string | null;
}

/** The outcome of checking a signed URL's `expires` and `signature`. */
export type SignatureCheck = 'valid' | 'expired' | 'invalid';

/** The settings row holding the key file URLs are signed with, shared by every process on the store. */
export const URL_SECRET_SETTING = 'files.url_signing_secret';

const FILE_ID = /^file_[0-9a-f]{32}$/;
const CONTENT_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/;

export const isFileId = (id: string) => FILE_ID.test(id);

/** Stored files looked up in the store at once by the sweep of orphans. */
const ORPHAN_BATCH = 256;

export function presentFile(row: FileRow): FileRecord {
  return {
    id: row.id,
    object: 'file',
    content_type: row.content_type,
    size_bytes: row.size_bytes,
    sha256: row.sha256,
    width: row.width,
    height: row.height,
    duration_ms: row.duration_ms,
    fps: row.fps,
    created_at: Math.floor(row.created_at / 1000),
    job_id: row.job_id,
  };
}

/** `files.dir`, or `<data_dir>/files` when it is left empty. */
export function filesDir(config: Config): string {
  return config.files.dir ? path.resolve(config.files.dir) : path.join(config.data_dir, 'files');
}

/** Produced media: stored bytes, their rows, and the signed URLs that let anyone holding one download a file. */
export class FileService {
  private constructor(
    private readonly store: Store,
    readonly storage: FileStorage,
    private readonly secret: string,
    private readonly publicUrl: () => string,
    private readonly urlTtlMs: number,
  ) {}

  /**
   * Loads the URL signing secret from the store, creating it on first use: every process on one
   * PostgreSQL signs and checks with the same key. `publicUrl` answers the gateway's absolute base URL.
   */
  static async create(
    store: Store,
    config: Config,
    publicUrl: () => string,
    storage: FileStorage = new LocalFileStorage(filesDir(config)),
  ): Promise<FileService> {
    const secret = await store.settings.ensure(URL_SECRET_SETTING, randomBytes(32).toString('hex'));
    return new FileService(store, storage, secret, publicUrl, parseDuration(config.files.url_ttl));
  }

  /** Stores a produced file for the organisation, measured from its own bytes. */
  async save(input: {
    orgId: string;
    jobId: string | null;
    data: Buffer;
    contentType: string;
  }): Promise<FileRecord> {
    const contentType = input.contentType.toLowerCase();
    if (!CONTENT_TYPE.test(contentType)) {
      throw new KilnError('internal-error', `not a content type: ${JSON.stringify(input.contentType)}`);
    }
    const id = `file_${uuidv7().replaceAll('-', '')}`;
    // Sharded by the random end of the id, so no directory grows too large.
    const storageKey = `${id.slice(-2)}/${id}`;
    await this.storage.put(storageKey, input.data);
    try {
      const media = await this.#probe(storageKey, input.data, contentType);
      const row = await this.store.files.insert({
        id,
        org_id: input.orgId,
        job_id: input.jobId,
        content_type: contentType,
        size_bytes: input.data.length,
        sha256: createHash('sha256').update(input.data).digest('hex'),
        storage_key: storageKey,
        width: media?.width ?? null,
        height: media?.height ?? null,
        duration_ms: media?.duration_ms ?? null,
        fps: media?.fps ?? null,
        created_at: Date.now(),
      });
      return presentFile(row);
    } catch (error) {
      await this.storage.delete(storageKey);
      throw error;
    }
  }

  /** Probes where the bytes already are on disk, or a temporary copy when storage is elsewhere. */
  async #probe(key: string, data: Buffer, contentType: string): Promise<MediaInfo | undefined> {
    if (this.storage.localPath) return probeMedia(this.storage.localPath(key), contentType);
    const dir = await mkdtemp(path.join(tmpdir(), 'kiln-probe-'));
    try {
      const file = path.join(dir, 'media');
      await writeFile(file, data);
      return await probeMedia(file, contentType);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** The organisation's file; another organisation's or an unknown one is the same 404. */
  async get(orgId: string, id: string): Promise<FileRow> {
    const row = isFileId(id) ? await this.store.files.get(orgId, id) : undefined;
    if (!row) throw notFound('file', id);
    return row;
  }

  /** A file whatever its organisation: for a request that carried a valid signature for this id. */
  async getSigned(id: string): Promise<FileRow> {
    const row = isFileId(id) ? await this.store.files.find(id) : undefined;
    if (!row) throw new KilnError('not-found', `no file '${id}'`);
    return row;
  }

  /**
   * Deletes the organisation's file: its row first (its URLs answer 404 from then on), then its
   * bytes. Another organisation's or an unknown one is the same 404.
   */
  async delete(orgId: string, id: string): Promise<FileRow> {
    const row = isFileId(id) ? await this.store.files.delete(orgId, id) : undefined;
    if (!row) throw notFound('file', id);
    await this.storage.delete(row.storage_key);
    return row;
  }

  /** Deletes every file a job produced; answers how many. */
  async deleteForJob(orgId: string, jobId: string): Promise<number> {
    let deleted = 0;
    for (const row of await this.store.files.byJob(orgId, jobId)) {
      // Whoever deletes the row removes the bytes: a file deleted meanwhile is simply not counted.
      const gone = await this.store.files.delete(orgId, row.id);
      if (!gone) continue;
      await this.storage.delete(gone.storage_key);
      deleted++;
    }
    return deleted;
  }

  /**
   * Deletes stored files written before `before` that no file row names: bytes whose row a restore
   * from an older backup took away, or that a crash left between writing them and their row.
   * Answers how many. Only names Kiln gives (`ab/file_…ab`) are touched.
   */
  async deleteOrphans(before: number): Promise<number> {
    if (!this.storage.writtenBefore) return 0;
    let deleted = 0;
    let batch: Array<{ key: string; id: string }> = [];
    const sweep = async () => {
      const known = await this.store.files.known(batch.map((file) => file.id));
      for (const { key, id } of batch) {
        if (known.has(id)) continue;
        await this.storage.delete(key);
        deleted++;
      }
      batch = [];
    };
    for await (const key of this.storage.writtenBefore(before)) {
      const [shard, id] = key.split('/') as [string, string | undefined];
      if (id === undefined || !isFileId(id) || shard !== id.slice(-2)) continue;
      batch.push({ key, id });
      if (batch.length === ORPHAN_BATCH) await sweep();
    }
    if (batch.length > 0) await sweep();
    return deleted;
  }

  /** The stored bytes, or `range` of them. */
  content(file: FileRow, range?: ByteRange): Promise<Readable> {
    return this.storage.read(file.storage_key, range);
  }

  /** `/v1/files/{id}/content?expires=…&signature=…` under the public URL, working for `ttlMs`. */
  signedUrl(file: Pick<FileRow, 'id'>, ttlMs = this.urlTtlMs): string {
    const expires = Math.floor((Date.now() + ttlMs) / 1000);
    const signature = this.#sign(file.id, String(expires));
    return `${this.publicUrl()}/v1/files/${file.id}/content?expires=${expires}&signature=${signature}`;
  }

  /** Checks a signed URL's parameters; a forged one is 'invalid' even when its time has passed. */
  verify(id: string, expires: unknown, signature: unknown): SignatureCheck {
    if (typeof expires !== 'string' || !/^\d{1,12}$/.test(expires)) return 'invalid';
    if (typeof signature !== 'string' || !/^[0-9a-f]{64}$/i.test(signature)) return 'invalid';
    const expected = Buffer.from(this.#sign(id, expires), 'hex');
    if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) return 'invalid';
    return Number(expires) * 1000 <= Date.now() ? 'expired' : 'valid';
  }

  #sign(id: string, expires: string): string {
    return createHmac('sha256', this.secret).update(`${id}.${expires}`).digest('hex');
  }
}
