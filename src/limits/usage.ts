import type { ApiKey, Store } from '../store/index.js';
import type { Limiter } from './admission.js';
import { LIMIT_NAMES, type LimitName } from './schema.js';

export interface LimitStanding {
  limit: number;
  used: number;
  remaining: number;
  /** When room next frees (a rate's oldest admission leaving the window, a budget's period ending); null for `concurrent`. */
  resets_at: string | null;
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Where the caller stands against each limit in force — the key's (with its tier's) and its
 * organisation's — as `GET /api/v1/usage` shows it: read without taking the admission lock, so a
 * moment later it may have moved.
 */
export async function limitStandings(
  store: Store,
  limiter: Limiter,
  key: ApiKey,
  now = Date.now(),
): Promise<Record<'key' | 'org', Partial<Record<LimitName, LimitStanding>>>> {
  const out: Record<'key' | 'org', Partial<Record<LimitName, LimitStanding>>> = { key: {}, org: {} };
  const dayStart = now - (now % 86_400_000);
  const d = new Date(now);
  const monthStart = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  for (const s of limiter.scopes(key)) {
    const minute = await store.admissions.window(s.scope, s.id, now - 60_000);
    const oldestOut = minute.oldest === null ? null : iso(minute.oldest + 60_000);
    const totals = await store.admissions.totals(s.scope, s.id, { day: dayStart, month: monthStart });
    const used: Record<LimitName, [number, string | null]> = {
      requests_per_minute: [minute.count, oldestOut],
      tokens_per_minute: [minute.tokens, oldestOut],
      concurrent: [await store.admissions.heldCount(s.scope, s.id), null],
      tokens_per_day: [totals.day_tokens, iso(dayStart + 86_400_000)],
      tokens_per_month: [totals.month_tokens, iso(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1))],
      media_seconds_per_day: [Math.floor(totals.day_media_ms / 1000), iso(dayStart + 86_400_000)],
    };
    for (const name of LIMIT_NAMES) {
      const limit = s.limits[name];
      if (limit === undefined) continue;
      const [n, resets] = used[name];
      out[s.scope][name] = { limit, used: n, remaining: Math.max(0, limit - n), resets_at: resets };
    }
  }
  return out;
}
