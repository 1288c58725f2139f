import type { SqlExecutor } from '../driver.js';

/** A produced file's row. Times are epoch milliseconds; media fields are null when they do not apply. */
export interface FileRow {
  id: string;
  org_id: string;
  job_id: string | null;
  content_type: string;
  size_bytes: number;
  sha256: string;
  /** Where the bytes are in file storage; never shown to clients. */
  storage_key: string;
  width: number | null;
  height: number | null;
  duration_ms: number | null;
  fps: number | null;
  created_at: number;
}

const COLUMNS =
  'id, org_id, job_id, content_type, size_bytes, sha256, storage_key, width, height, duration_ms, fps, created_at';

/**
 * PostgreSQL keeps `fps` as REAL (4 bytes), SQLite as 8: 29.97 comes back as 29.969999… from one
 * of them. Three decimals is more than any frame rate needs and the same on both.
 */
const roundFps = (fps: number | null) => (fps === null ? null : Math.round(fps * 1000) / 1000);
const normalise = (row: FileRow | undefined) => (row ? { ...row, fps: roundFps(row.fps) } : undefined);

export class FileRepository {
  constructor(private readonly db: SqlExecutor) {}

  async insert(file: FileRow): Promise<FileRow> {
    const row = await this.db.get<FileRow>(
      `INSERT INTO files (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ${COLUMNS}`,
      [
        file.id,
        file.org_id,
        file.job_id,
        file.content_type,
        file.size_bytes,
        file.sha256,
        file.storage_key,
        file.width,
        file.height,
        file.duration_ms,
        roundFps(file.fps),
        file.created_at,
      ],
    );
    return normalise(row) as FileRow;
  }

  /** The organisation's file, or undefined for an unknown id or another organisation's file. */
  async get(orgId: string, id: string): Promise<FileRow | undefined> {
    return normalise(
      await this.db.get<FileRow>(`SELECT ${COLUMNS} FROM files WHERE org_id = ? AND id = ?`, [orgId, id]),
    );
  }

  /** Any organisation's file: only for callers that proved their right to it another way (a signed URL). */
  async find(id: string): Promise<FileRow | undefined> {
    return normalise(await this.db.get<FileRow>(`SELECT ${COLUMNS} FROM files WHERE id = ?`, [id]));
  }

  /** Which of `ids` have a row, whatever their organisation. */
  async known(ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = await this.db.all<{ id: string }>(
      `SELECT id FROM files WHERE id IN (${ids.map(() => '?').join(', ')})`,
      ids,
    );
    return new Set(rows.map((row) => row.id));
  }

  /** The files a job produced, oldest first. */
  async byJob(orgId: string, jobId: string): Promise<FileRow[]> {
    const rows = await this.db.all<FileRow>(
      `SELECT ${COLUMNS} FROM files WHERE org_id = ? AND job_id = ? ORDER BY id`,
      [orgId, jobId],
    );
    return rows.map((row) => normalise(row) as FileRow);
  }

  /** Deletes the row and answers it (its storage key is the caller's to remove), or undefined. */
  async delete(orgId: string, id: string): Promise<FileRow | undefined> {
    return normalise(
      await this.db.get<FileRow>(`DELETE FROM files WHERE org_id = ? AND id = ? RETURNING ${COLUMNS}`, [
        orgId,
        id,
      ]),
    );
  }
}
