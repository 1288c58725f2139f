import { randomBase62 } from '../../ids.js';
import type { Dialect, SqlExecutor } from '../driver.js';
import type { WebhookDelivery } from '../types.js';

const placeholders = (n: number) => Array.from({ length: n }, () => '?').join(', ');

/** The webhook outbox: rows written with the terminal transition, delivered and retried from here. */
export class WebhookRepository {
  constructor(
    private readonly db: SqlExecutor,
    private readonly dialect: Dialect,
  ) {}

  async enqueue(input: {
    jobId: string;
    orgId: string;
    url: string;
    event: string;
    body: string;
    now: number;
  }): Promise<string> {
    const id = `whd_${randomBase62(24)}`;
    await this.db.run(
      `INSERT INTO webhook_deliveries (id, job_id, org_id, url, event, body, status, next_attempt_at, created_at)
       VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (job_id) DO NOTHING`,
      [id, input.jobId, input.orgId, input.url, input.event, input.body, input.now, input.now],
    );
    return id;
  }

  /** Leases up to `limit` due deliveries to `owner`, with the secret each is signed with and its job's trace. */
  async claimDue(owner: string, now: number, leaseUntil: number, limit: number): Promise<WebhookDelivery[]> {
    const claimed = await this.db.all<{ id: string }>(
      `UPDATE webhook_deliveries SET lease_owner = ?, lease_expires_at = ?
       WHERE id IN (
         SELECT id FROM webhook_deliveries
         WHERE status = 'pending' AND next_attempt_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at < ?)
         ORDER BY next_attempt_at LIMIT ?${this.dialect.skipLocked}
       )
       RETURNING id`,
      [owner, leaseUntil, now, now, limit],
    );
    if (claimed.length === 0) return [];
    return this.db.all<WebhookDelivery>(
      `SELECT d.id, d.job_id, d.org_id, d.url, d.event, d.body, d.attempts,
         COALESCE(j.webhook_secret, o.webhook_secret) AS secret, j.traceparent
       FROM webhook_deliveries d JOIN jobs j ON j.id = d.job_id JOIN orgs o ON o.id = d.org_id
       WHERE d.id IN (${placeholders(claimed.length)}) AND d.lease_owner = ?`,
      [...claimed.map((c) => c.id), owner],
    );
  }

  /**
   * A deleted job's deliveries: their bodies (which carry its result) erased, and one still pending
   * given up, its lease dropped so that an attempt in flight records nothing over it.
   */
  async dropForJob(jobId: string): Promise<void> {
    await this.db.run(
      `UPDATE webhook_deliveries SET body = '{}', lease_owner = NULL, lease_expires_at = NULL,
         status = CASE WHEN status = 'pending' THEN 'failed' ELSE status END,
         last_error = CASE WHEN status = 'pending' THEN 'not sent: its job was deleted' ELSE last_error END
       WHERE job_id = ?`,
      [jobId],
    );
  }

  /** Records one attempt's outcome; `next` set means try again then, otherwise `status` is final. */
  async recordAttempt(
    id: string,
    owner: string,
    attempt: {
      status: 'pending' | 'delivered' | 'failed' | 'gone';
      httpStatus: number | null;
      error: string | null;
      next: number | null;
      now: number;
    },
  ): Promise<void> {
    await this.db.run(
      `UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1, last_status = ?, last_error = ?,
         next_attempt_at = COALESCE(?, next_attempt_at), lease_owner = NULL, lease_expires_at = NULL,
         delivered_at = CASE WHEN ? = 'delivered' THEN ? ELSE delivered_at END
       WHERE id = ? AND lease_owner = ?`,
      [
        attempt.status,
        attempt.httpStatus,
        attempt.error,
        attempt.next,
        attempt.status,
        attempt.now,
        id,
        owner,
      ],
    );
  }

  /** When the next pending delivery falls due, if any. */
  async nextDueAt(): Promise<number | undefined> {
    // A delivery leased elsewhere (in flight in another process, or held by one that crashed) can be
    // claimed only once that lease has lapsed: waking before then would find nothing, again and again.
    const row = await this.db.get<{ at: number | string | null }>(
      `SELECT MIN(CASE WHEN lease_expires_at >= next_attempt_at THEN lease_expires_at + 1 ELSE next_attempt_at END) AS at
       FROM webhook_deliveries WHERE status = 'pending'`,
    );
    return row?.at === null || row?.at === undefined ? undefined : Number(row.at);
  }

  async forJob(jobId: string): Promise<DeliveryState | undefined> {
    const row = await this.db.get<Record<keyof DeliveryState, string | number | null>>(
      `SELECT id, status, attempts, last_status, last_error, event, created_at, next_attempt_at, delivered_at
       FROM webhook_deliveries WHERE job_id = ?`,
      [jobId],
    );
    if (!row) return undefined;
    const time = (value: string | number | null) => (value === null ? null : Number(value));
    return {
      id: String(row.id),
      status: String(row.status),
      event: String(row.event),
      attempts: Number(row.attempts),
      last_status: row.last_status === null ? null : Number(row.last_status),
      last_error: row.last_error === null ? null : String(row.last_error),
      created_at: Number(row.created_at),
      next_attempt_at: time(row.next_attempt_at),
      delivered_at: time(row.delivered_at),
    };
  }
}

/** A job's webhook delivery as it stands (times in Unix milliseconds). */
export interface DeliveryState {
  id: string;
  status: string;
  event: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  created_at: number;
  next_attempt_at: number | null;
  delivered_at: number | null;
}
