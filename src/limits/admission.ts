import type { ApiKey, Repositories, Tier } from '../store/index.js';
import type { Scope } from '../store/repos/admissions.js';
import type { Metered, MeterSettings } from './meter.js';
import { type RateWindows, refusal, type Violation, type Window } from './refusal.js';
import { hasLimits, type LimitName, type Limits, tightest } from './schema.js';

export interface LimitsSettings extends MeterSettings {
  tiers: Record<Tier, Limits>;
}

/** One set of limits in force for a request, and whose counters it is checked against. */
export interface ScopeLimits {
  scope: Scope;
  id: string;
  /** How the caller is named in messages: the key's id, the organisation's name. */
  label: string;
  limits: Limits;
}

const MINUTE_MS = 60_000;
/** Admissions are folded into daily totals once they are this old, at most this often per caller. */
const FOLD_MARGIN_MS = 60_000;
const FOLD_EVERY_MS = 10_000;
/** A caller at its `concurrent` limit is told to look again this soon: jobs end at any moment. */
const CONCURRENT_RETRY_MS = 1000;

const startOfDay = (now: number) => now - (now % 86_400_000);
const startOfMonth = (now: number) => {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
};
const startOfNextMonth = (now: number) => {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
};

/** The tighter of two windows for the headers: the one with less left (then the later reset). */
function tighter(a: Window | undefined, b: Window): Window {
  if (!a) return b;
  if (b.remaining !== a.remaining) return b.remaining < a.remaining ? b : a;
  return b.resetMs > a.resetMs ? b : a;
}

export type Verdict = { admitted: true; windows: RateWindows } | { admitted: false; error: Error };

/**
 * Admission: every request that creates work is checked against the limits of its key (its own,
 * and its tier's defaults) and of its organisation, inside the transaction that records the job —
 * so an admission and its job exist together or not at all, and no budget can leak. Counts come
 * from the store, so every gateway process sees the same ones.
 */
export class Limiter {
  #settings: LimitsSettings;
  readonly rejections = new Map<string, number>();
  /** When this process last folded each caller's admissions (any process may; this only spaces them). */
  readonly #folded = new Map<string, number>();
  admitted = 0;

  constructor(settings: LimitsSettings) {
    this.#settings = settings;
  }

  get settings(): LimitsSettings {
    return this.#settings;
  }

  /** New tier defaults and meter settings (a configuration reload). */
  configure(settings: LimitsSettings): void {
    this.#settings = settings;
  }

  /** The limits in force for this key: its own and its tier's, the tighter of each; then its organisation's. */
  scopes(key: ApiKey): ScopeLimits[] {
    const scopes: ScopeLimits[] = [];
    const own = tightest(key.limits, this.#settings.tiers[key.tier] ?? {});
    if (hasLimits(own)) scopes.push({ scope: 'key', id: key.id, label: `key ${key.id}`, limits: own });
    if (hasLimits(key.org_limits))
      scopes.push({
        scope: 'org',
        id: key.org_id,
        label: `organisation ${key.org_name}`,
        limits: key.org_limits,
      });
    return scopes;
  }

  /**
   * The caller's per-minute windows as they stand, read without the admission lock: the
   * `x-ratelimit-*` headers of answers that create no work. Empty when no per-minute limit applies.
   */
  async peek(store: Repositories, key: ApiKey, now = Date.now()): Promise<RateWindows> {
    const windows: RateWindows = {};
    for (const s of this.scopes(key)) {
      const rpm = s.limits.requests_per_minute;
      const tpm = s.limits.tokens_per_minute;
      if (rpm === undefined && tpm === undefined) continue;
      const window = await store.admissions.window(s.scope, s.id, now - MINUTE_MS);
      const resetMs = window.oldest === null ? 0 : window.oldest + MINUTE_MS - now;
      if (rpm !== undefined)
        windows.requests = tighter(windows.requests, {
          limit: rpm,
          remaining: Math.max(0, rpm - window.count),
          resetMs,
        });
      if (tpm !== undefined)
        windows.tokens = tighter(windows.tokens, {
          limit: tpm,
          remaining: Math.max(0, tpm - window.tokens),
          resetMs,
        });
    }
    return windows;
  }

  /**
   * Checks the request against every scope and, when it fits, records its admission in `tx` (the
   * job's transaction). A refusal writes nothing. Rates count the last 60 seconds exactly; budgets
   * the UTC day and month; `concurrent` the caller's jobs still queued or running.
   */
  async admit(
    tx: Repositories,
    key: ApiKey,
    scopes: ScopeLimits[],
    cost: Metered,
    jobId: string,
    now: number,
  ): Promise<Verdict> {
    for (const s of scopes) await tx.admissions.lock(s.scope, s.id);
    // The windows as of now, after the lock: an admission another gateway committed while this one
    // waited may be younger than `now`, which would put its room more than a minute away.
    const at = Math.max(now, Date.now());
    const violations: Violation[] = [];
    const windows: RateWindows = {};
    for (const s of scopes) {
      const { limits } = s;
      const over = (name: LimitName, used: number, limit: number, retryMs: number, resetsAt?: number) =>
        violations.push({ scope: s, name, used, limit, retryMs: Math.max(1, retryMs), resetsAt });

      if (limits.concurrent !== undefined) {
        const held = await tx.admissions.heldCount(s.scope, s.id);
        if (held >= limits.concurrent) over('concurrent', held, limits.concurrent, CONCURRENT_RETRY_MS);
      }

      const rpm = limits.requests_per_minute;
      const tpm = limits.tokens_per_minute;
      if (rpm !== undefined || tpm !== undefined) {
        const since = at - MINUTE_MS;
        const window = await tx.admissions.window(s.scope, s.id, since);
        // The window frees its oldest admission first, within a minute (clocks of gateways may differ).
        const leaves = (createdAt: number) => Math.min(MINUTE_MS, createdAt + MINUTE_MS - at);
        const firstOut = window.oldest === null ? MINUTE_MS : leaves(window.oldest);
        if (rpm !== undefined) {
          if (window.count >= rpm) {
            // Room for one more once all but rpm - 1 of them have left the window.
            const freeing = await tx.admissions.nth(s.scope, s.id, since, window.count - rpm);
            const retry = freeing === undefined ? firstOut : leaves(freeing);
            over('requests_per_minute', window.count, rpm, retry, at + retry);
          }
          windows.requests = tighter(windows.requests, {
            limit: rpm,
            remaining: Math.max(0, rpm - window.count),
            resetMs: firstOut,
          });
        }
        if (tpm !== undefined) {
          if (cost.tokens > 0 && window.tokens >= tpm) {
            // Room once enough of the oldest admissions' tokens have left the window.
            let used = window.tokens;
            let retry = firstOut;
            for (const r of await tx.admissions.since(s.scope, s.id, since)) {
              used -= r.tokens;
              retry = leaves(r.created_at);
              if (used < tpm) break;
            }
            over('tokens_per_minute', window.tokens, tpm, retry, at + retry);
          }
          windows.tokens = tighter(windows.tokens, {
            limit: tpm,
            remaining: Math.max(0, tpm - window.tokens),
            resetMs: firstOut,
          });
        }
      }

      const day = limits.tokens_per_day;
      const month = limits.tokens_per_month;
      const media = limits.media_seconds_per_day;
      const tokensBudget = cost.tokens > 0 && (day !== undefined || month !== undefined);
      const mediaBudget = cost.media_ms > 0 && media !== undefined;
      if (tokensBudget || mediaBudget) {
        const dayStart = startOfDay(now);
        const monthStart = month !== undefined && tokensBudget ? startOfMonth(now) : dayStart;
        // Settled admissions a while old go into daily totals first (the margin covers clocks of
        // gateways that disagree a little), so the sums stay short however busy the month.
        if (now - (this.#folded.get(`${s.scope}:${s.id}`) ?? 0) >= FOLD_EVERY_MS) {
          await tx.admissions.fold(s.scope, s.id, now - FOLD_MARGIN_MS);
          if (this.#folded.size >= 10_000) this.#folded.clear();
          this.#folded.set(`${s.scope}:${s.id}`, now);
        }
        const totals = await tx.admissions.totals(s.scope, s.id, { day: dayStart, month: monthStart });
        const nextDay = dayStart + 86_400_000;
        if (tokensBudget && day !== undefined && totals.day_tokens >= day)
          over('tokens_per_day', totals.day_tokens, day, nextDay - now, nextDay);
        if (tokensBudget && month !== undefined && totals.month_tokens >= month) {
          const next = startOfNextMonth(now);
          over('tokens_per_month', totals.month_tokens, month, next - now, next);
        }
        if (mediaBudget && media !== undefined && totals.day_media_ms >= media * 1000)
          over(
            'media_seconds_per_day',
            Math.floor(totals.day_media_ms / 1000),
            media,
            nextDay - now,
            nextDay,
          );
      }
    }

    if (violations.length > 0) {
      for (const v of violations) {
        const label = `${v.name}:${v.scope.scope}`;
        this.rejections.set(label, (this.rejections.get(label) ?? 0) + 1);
      }
      return { admitted: false, error: refusal(violations, windows) };
    }
    await tx.admissions.insert({
      job_id: jobId,
      key_id: key.id,
      org_id: key.org_id,
      created_at: now,
      tokens: cost.tokens,
      media_ms: cost.media_ms,
      held: 1,
    });
    this.admitted++;
    // What is left once this request is counted.
    if (windows.requests)
      windows.requests = { ...windows.requests, remaining: Math.max(0, windows.requests.remaining - 1) };
    if (windows.tokens)
      windows.tokens = { ...windows.tokens, remaining: Math.max(0, windows.tokens.remaining - cost.tokens) };
    return { admitted: true, windows };
  }
}
