import { newId } from '../../ids.js';
import type { SqlExecutor } from '../driver.js';
import type { ApiKey, Role, Tier } from '../types.js';

const COLUMNS = `k.id, k.org_id, o.name AS org_name, k.prefix, k.name, k.tier, k.role, k.created_at, k.revoked_at
  FROM api_keys k JOIN orgs o ON o.id = k.org_id`;

export interface NewKey {
  orgId: string;
  hash: string;
  prefix: string;
  name: string | null;
  tier: Tier;
  role: Role;
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
      'INSERT INTO api_keys (id, org_id, hash, prefix, name, tier, role, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      [id, key.orgId, key.hash, key.prefix, key.name, key.tier, key.role, Date.now()],
    );
    return (await this.db.get<ApiKey>(`SELECT ${COLUMNS} WHERE k.id = ?`, [id])) as ApiKey;
  }

  /** The live key with this SHA-256 hash; revoked and unknown keys both answer undefined. */
  async findActiveByHash(hash: string): Promise<ApiKey | undefined> {
    return this.db.get<ApiKey>(`SELECT ${COLUMNS} WHERE k.hash = ? AND k.revoked_at IS NULL`, [hash]);
  }

  async list(orgId?: string): Promise<ApiKey[]> {
    return orgId === undefined
      ? this.db.all<ApiKey>(`SELECT ${COLUMNS} ORDER BY k.id`)
      : this.db.all<ApiKey>(`SELECT ${COLUMNS} WHERE k.org_id = ? ORDER BY k.id`, [orgId]);
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
