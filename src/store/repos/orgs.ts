import { newId } from '../../ids.js';
import { type Limits, parseLimits } from '../../limits/schema.js';
import type { SqlExecutor } from '../driver.js';
import type { Org } from '../types.js';
import { mergeIntoLimits } from './keys.js';

export class OrgRepository {
  constructor(
    private readonly db: SqlExecutor,
    /** Told after limits change, so caches of live keys (which carry them) forget them. */
    private readonly onChange?: () => Promise<void>,
  ) {}

  /** Creates the organisation, or answers undefined when the name is taken. */
  async create(name: string): Promise<Org | undefined> {
    return this.db.get<Org>(
      'INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING id, name, created_at',
      [newId('org'), name, Date.now()],
    );
  }

  async byName(name: string): Promise<Org | undefined> {
    return this.db.get<Org>('SELECT id, name, created_at FROM orgs WHERE name = ?', [name]);
  }

  async list(): Promise<Org[]> {
    return this.db.all<Org>('SELECT id, name, created_at FROM orgs ORDER BY name');
  }

  async count(): Promise<number> {
    const row = await this.db.get<{ n: number }>('SELECT COUNT(*) AS n FROM orgs');
    return Number(row?.n ?? 0);
  }

  async limits(orgId: string): Promise<Limits> {
    const row = await this.db.get<{ limits: string | null }>('SELECT limits FROM orgs WHERE id = ?', [orgId]);
    return parseLimits(row?.limits);
  }

  /** Sets (a number) or removes (null) the organisation's limits; false when there is no such organisation. */
  async updateLimits(orgId: string, change: Partial<Record<keyof Limits, number | null>>): Promise<boolean> {
    const changed = await mergeIntoLimits(this.db, 'orgs', orgId, change);
    if (changed) await this.onChange?.();
    return changed;
  }

  /** The secret that signs the organisation's webhooks when a submission brings none. */
  async webhookSecret(orgId: string): Promise<string | null> {
    const row = await this.db.get<{ webhook_secret: string | null }>(
      'SELECT webhook_secret FROM orgs WHERE id = ?',
      [orgId],
    );
    return row?.webhook_secret ?? null;
  }

  /** Sets the secret; with `onlyIfMissing` an existing one is kept. Answers the secret in force. */
  async setWebhookSecret(orgId: string, secret: string, onlyIfMissing: boolean): Promise<string | null> {
    await this.db.run(
      `UPDATE orgs SET webhook_secret = ? WHERE id = ?${onlyIfMissing ? ' AND webhook_secret IS NULL' : ''}`,
      [secret, orgId],
    );
    return this.webhookSecret(orgId);
  }
}
