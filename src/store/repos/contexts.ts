import { newId } from '../../ids.js';
import type { SqlExecutor } from '../driver.js';
import type { Context, ContextMeta, Page } from '../types.js';

const META = 'id, org_id, name, description, size_bytes, sha256, version, created_at, updated_at, created_by';

export interface SaveContext {
  orgId: string;
  name: string;
  content: string;
  description: string | null;
  sizeBytes: number;
  sha256: string;
  createdBy: string;
}

/**
 * What must hold for a save to happen: no context of that name (`If-None-Match: *`), one
 * (`If-Match: *`), or one whose id and version are among `tags` (`If-Match` with ETags).
 */
export type SaveCondition =
  | { kind: 'absent' }
  | { kind: 'present' }
  | { kind: 'match'; tags: ReadonlyArray<{ id: string; version: number }> };

type Saved = { context: ContextMeta; created: boolean };

/** A context is addressed by its id (`ctx_…`) or by its name; names never start with `ctx_`. */
const column = (idOrName: string) => (idOrName.startsWith('ctx_') ? 'id' : 'name');

export class ContextRepository {
  constructor(private readonly db: SqlExecutor) {}

  /**
   * Creates the context or replaces the content of the one with the same name, in one statement so
   * concurrent saves cannot lose a version. A description left out keeps the one stored. With a
   * condition, in one statement too: `absent` creates only, `present` replaces only, `match`
   * replaces only the context of one of these ids at that version; undefined when it does not hold.
   */
  async save(input: SaveContext): Promise<Saved>;
  async save(input: SaveContext, condition: SaveCondition | undefined): Promise<Saved | undefined>;
  async save(input: SaveContext, condition?: SaveCondition): Promise<Saved | undefined> {
    const now = Date.now();
    if (condition && condition.kind !== 'absent') return this.#replace(input, condition, now);
    const context = await this.db.get<ContextMeta>(
      `INSERT INTO contexts (id, org_id, name, description, content, size_bytes, sha256, version, created_at, updated_at, created_by)
       VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)
       ON CONFLICT (org_id, name) DO ${
         condition
           ? 'NOTHING'
           : `UPDATE SET
         description = COALESCE(excluded.description, contexts.description),
         content = excluded.content,
         size_bytes = excluded.size_bytes,
         sha256 = excluded.sha256,
         version = contexts.version + 1,
         updated_at = excluded.updated_at`
       }
       RETURNING ${META}`,
      [
        newId('ctx'),
        input.orgId,
        input.name,
        input.description,
        input.content,
        input.sizeBytes,
        input.sha256,
        now,
        now,
        input.createdBy,
      ],
    );
    return context && { context, created: context.version === 1 };
  }

  async #replace(
    input: SaveContext,
    condition: Exclude<SaveCondition, { kind: 'absent' }>,
    now: number,
  ): Promise<Saved | undefined> {
    const tags = condition.kind === 'match' ? condition.tags : [];
    if (condition.kind === 'match' && tags.length === 0) return undefined;
    const matching =
      tags.length > 0 ? ` AND (${tags.map(() => '(id = ? AND version = ?)').join(' OR ')})` : '';
    const context = await this.db.get<ContextMeta>(
      `UPDATE contexts SET
         description = COALESCE(?, description),
         content = ?,
         size_bytes = ?,
         sha256 = ?,
         version = version + 1,
         updated_at = ?
       WHERE org_id = ? AND name = ?${matching}
       RETURNING ${META}`,
      [
        input.description,
        input.content,
        input.sizeBytes,
        input.sha256,
        now,
        input.orgId,
        input.name,
        ...tags.flatMap((tag) => [tag.id, tag.version]),
      ],
    );
    return context && { context, created: false };
  }

  async get(orgId: string, idOrName: string): Promise<Context | undefined> {
    return this.db.get<Context>(
      `SELECT ${META}, content FROM contexts WHERE org_id = ? AND ${column(idOrName)} = ?`,
      [orgId, idOrName],
    );
  }

  /** The size in bytes of each of `names` the organisation has a context for; the others are absent. */
  async sizes(orgId: string, names: readonly string[]): Promise<Map<string, number>> {
    if (names.length === 0) return new Map();
    const unique = [...new Set(names)];
    const found = await this.db.all<{ name: string; size_bytes: number | string }>(
      `SELECT name, size_bytes FROM contexts WHERE org_id = ? AND name IN (${unique.map(() => '?').join(', ')})`,
      [orgId, ...unique],
    );
    return new Map(found.map((r) => [r.name, Number(r.size_bytes)]));
  }

  /** The names of `names` the organisation has no context for. */
  async missing(orgId: string, names: readonly string[]): Promise<string[]> {
    const have = await this.sizes(orgId, names);
    return [...new Set(names)].filter((n) => !have.has(n));
  }

  /** Contexts ordered by name; `after` is the last name of the previous page. */
  async list(
    orgId: string,
    options: { prefix?: string; after?: string; limit: number },
  ): Promise<Page<ContextMeta>> {
    const where = ['org_id = ?'];
    const params: unknown[] = [orgId];
    if (options.prefix) {
      where.push('substr(name, 1, ?) = ?');
      params.push(options.prefix.length, options.prefix);
    }
    if (options.after) {
      where.push('name > ?');
      params.push(options.after);
    }
    params.push(options.limit + 1);
    const rows = await this.db.all<ContextMeta>(
      `SELECT ${META} FROM contexts WHERE ${where.join(' AND ')} ORDER BY name LIMIT ?`,
      params,
    );
    return { data: rows.slice(0, options.limit), has_more: rows.length > options.limit };
  }

  /** Deletes and answers the deleted id, or undefined when there was none. */
  /** Deletes a context; with `tags`, only while it is one of those versions (none: nothing). */
  async delete(
    orgId: string,
    idOrName: string,
    tags?: ReadonlyArray<{ id: string; version: number }>,
  ): Promise<string | undefined> {
    if (tags && tags.length === 0) return undefined;
    const matching = tags ? ` AND (${tags.map(() => '(id = ? AND version = ?)').join(' OR ')})` : '';
    const row = await this.db.get<{ id: string }>(
      `DELETE FROM contexts WHERE org_id = ? AND ${column(idOrName)} = ?${matching} RETURNING id`,
      [orgId, idOrName, ...(tags ?? []).flatMap((tag) => [tag.id, tag.version])],
    );
    return row?.id;
  }
}
