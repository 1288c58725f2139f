import { KilnError } from '../../errors.js';
import { newId } from '../../ids.js';
import { type Limits, parseLimits } from '../../limits/schema.js';
import type { SqlExecutor } from '../driver.js';
import type { ApiKey, Role, Tier } from '../types.js';

const COLUMNS = `k.id, k.org_id, o.name AS org_name, k.prefix, k.name, k.tier, k.role, k.created_at, k.revoked_at,
  k.limits, o.limits AS org_limits
  FROM api_keys k JOIN orgs o ON o.id = k.org_id`;

type KeyRow = Omit<ApiKey, 'limits' | 'org_limits'> & { limits: string | null; org_limits: string | null };

const toKey = (row: KeyRow): ApiKey => ({
  ...row,
  limits: parseLimits(row.limits),
  org_limits: parseLimits(row.org_limits),
});

export interface NewKey {
  orgId: string;
  hash: string;
  prefix: string;
  name: string | null;
  tier: Tier;
  role: Role;
  limits?: Limits;
}

export class KeyRepository {
  constructor(
    private readonly db: SqlExecutor,
    /** Told after a key stops being live, so caches of live keys forget it. */
    private readonly onRevoke?: () => Promise<void>,
  ) {}

  async create(key: NewKey): Promise<ApiKey> {
    const id = newId('key');
    await this.db.run(
      'INSERT INTO api_keys (id, org_id, hash, prefix, name, tier, role, created_at, limits) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
      [id, key.orgId, key.hash, key.prefix, key.name, key.tier, key.role, Date.now(), limitsText(key.limits)],
    );
    return (await this.byId(id)) as ApiKey;
  }

  async byId(id: string): Promise<ApiKey | undefined> {
    const row = await this.db.get<KeyRow>(`SELECT ${COLUMNS} WHERE k.id = ?`, [id]);
    return row && toKey(row);
  }

  /** The live key with this SHA-256 hash; revoked and unknown keys both answer undefined. */
  async findActiveByHash(hash: string): Promise<ApiKey | undefined> {
    const row = await this.db.get<KeyRow>(`SELECT ${COLUMNS} WHERE k.hash = ? AND k.revoked_at IS NULL`, [
      hash,
    ]);
    return row && toKey(row);
  }

  async list(orgId?: string): Promise<ApiKey[]> {
    const rows =
      orgId === undefined
        ? await this.db.all<KeyRow>(`SELECT ${COLUMNS} ORDER BY k.id`)
        : await this.db.all<KeyRow>(`SELECT ${COLUMNS} WHERE k.org_id = ? ORDER BY k.id`, [orgId]);
    return rows.map(toKey);
  }

  /**
   * Changes a live key's tier and limits (a limit set to null is removed); answers the key, or
   * undefined when there is no such live key. Caches of live keys forget it, as on a revocation.
   */
  async update(id: string, change: { tier?: Tier; limits?: Partial<Record<keyof Limits, number | null>> }) {
    const changed = await mergeIntoLimits(
      this.db,
      'api_keys',
      id,
      change.limits ?? {},
      // A tier left out is left as it is, whatever another update sets meanwhile.
      { set: 'tier = COALESCE(?, tier)', params: [change.tier ?? null], live: 'revoked_at IS NULL' },
    );
    if (!changed) return undefined;
    await this.onRevoke?.();
    return this.byId(id);
  }

  /** Revokes a live key; answers false when there is no such live key. */
  async revoke(id: string): Promise<boolean> {
    const changed = await this.db.run(
      'UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL',
      [Date.now(), id],
    );
    if (changed > 0) await this.onRevoke?.();
    return changed > 0;
  }
}

/** Limits as their column: JSON, or null for none. */
export const limitsText = (limits: Limits | undefined) =>
  limits && Object.keys(limits).length > 0 ? JSON.stringify(limits) : null;

/**
 * Applies `change` to a row's limits — those it does not name are kept — by compare-and-set on the
 * column as read, again while another update got in between: two changes at once each keep the
 * other's (read, merge, write, as it was, kept only the last on PostgreSQL). False when no such
 * row (`also.live`) exists.
 */
export async function mergeIntoLimits(
  db: SqlExecutor,
  table: 'api_keys' | 'orgs',
  id: string,
  change: Partial<Record<keyof Limits, number | null>>,
  also: { set?: string; params?: unknown[]; live?: string } = {},
): Promise<boolean> {
  const live = also.live ? ` AND ${also.live}` : '';
  for (let attempt = 0; attempt < 16; attempt++) {
    const row = await db.get<{ limits: string | null }>(`SELECT limits FROM ${table} WHERE id = ?${live}`, [
      id,
    ]);
    if (!row) return false;
    const next = limitsText(mergeLimits(parseLimits(row.limits), change));
    const set = also.set ? `${also.set}, limits = ?` : 'limits = ?';
    const written = await db.run(
      `UPDATE ${table} SET ${set} WHERE id = ?${live} AND COALESCE(limits, '') = ?`,
      [...(also.params ?? []), next, id, row.limits ?? ''],
    );
    if (written > 0) return true;
    // Many changes at once to one row: a short random wait lets them take turns.
    await new Promise((resolve) => setTimeout(resolve, Math.random() * 2 * (attempt + 1)));
  }
  throw new KilnError(
    'conflict',
    'its limits kept changing under this update, by others made at the same moment; nothing was changed, try again',
    { param: 'limits' },
  );
}

/** `base` with `change` applied: a number sets a limit, null removes it. */
export function mergeLimits(base: Limits, change: Partial<Record<keyof Limits, number | null>>): Limits {
  const out: Record<string, number> = { ...base };
  for (const [name, value] of Object.entries(change)) {
    if (value === null) delete out[name];
    else if (value !== undefined) out[name] = value;
  }
  return out as Limits;
}
