import { KilnError } from '../errors.js';
import type { ScopeLimits } from './admission.js';
import { BUDGETS, type LimitName } from './schema.js';

/** One per-minute limit as OpenAI's headers report it. */
export interface Window {
  limit: number;
  remaining: number;
  /** Until the window next frees something. */
  resetMs: number;
}

/** The tightest request and token windows of a caller, for the `x-ratelimit-*` headers. */
export interface RateWindows {
  requests?: Window;
  tokens?: Window;
}

/** A limit a request would break. */
export interface Violation {
  scope: ScopeLimits;
  name: LimitName;
  used: number;
  limit: number;
  /** How long until the request could be admitted, as far as this limit goes. */
  retryMs: number;
  /** When the limit frees room (unknown for `concurrent`). */
  resetsAt: number | undefined;
}

/** A duration as OpenAI writes its resets: `20ms`, `1.5s`, `6m0s`. */
export function resetText(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1000) return `${whole}ms`;
  if (whole < 60_000) return `${Number((whole / 1000).toFixed(3))}s`;
  const minutes = Math.floor(whole / 60_000);
  const seconds = Number(((whole % 60_000) / 1000).toFixed(3));
  if (minutes < 60) return `${minutes}m${seconds}s`;
  return `${Math.floor(minutes / 60)}h${minutes % 60}m${seconds}s`;
}

/** OpenAI's rate-limit headers, so its clients (and others that read them) pace themselves. */
export function rateHeaders(windows: RateWindows): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, window] of Object.entries(windows) as Array<[string, Window | undefined]>) {
    if (!window) continue;
    headers[`x-ratelimit-limit-${name}`] = String(window.limit);
    headers[`x-ratelimit-remaining-${name}`] = String(window.remaining);
    headers[`x-ratelimit-reset-${name}`] = resetText(window.resetMs);
  }
  return headers;
}

const UNITS: Record<LimitName, string> = {
  requests_per_minute: 'requests per minute',
  tokens_per_minute: 'tokens per minute',
  concurrent: 'jobs queued or running at once',
  tokens_per_day: 'tokens per day',
  tokens_per_month: 'tokens per month',
  media_seconds_per_day: 'media seconds per day',
};

/**
 * The 429 for a refused request: `budget-exceeded` when a budget is spent, else `rate-limited`;
 * every broken limit in `details`; `Retry-After` (and OpenAI's `retry-after-ms`) for when all of
 * them would let it through.
 */
export function refusal(violations: Violation[], windows: RateWindows): KilnError {
  const retryMs = Math.max(...violations.map((v) => v.retryMs));
  // A limit of 0 admits nothing, ever: no time to retry at, until an admin raises it.
  const never = violations.some((v) => v.limit === 0);
  const details = violations.map((v) => {
    const when =
      v.resetsAt === undefined ? 'when one of them ends' : `at ${new Date(v.resetsAt).toISOString()}`;
    return {
      field: v.name,
      rule: BUDGETS.has(v.name) ? 'budget' : 'rate',
      message:
        v.limit === 0
          ? `${v.scope.label} has a limit of 0 ${UNITS[v.name]}: nothing is admitted until an admin raises it`
          : `${v.scope.label} has used ${v.used} of its ${v.limit} ${UNITS[v.name]}; room frees ${when}`,
      scope: v.scope.scope,
      limit: v.limit,
      used: v.used,
      ...(v.resetsAt === undefined || v.limit === 0 ? {} : { resets_at: new Date(v.resetsAt).toISOString() }),
      ...(v.limit === 0 ? {} : { retry_after_ms: Math.ceil(v.retryMs) }),
    };
  });
  const budget = violations.some((v) => BUDGETS.has(v.name));
  const first = (details.find((d) => d.limit === 0) ?? details[0])?.message ?? 'limit reached';
  const retrySeconds = Math.max(1, Math.ceil(retryMs / 1000));
  return new KilnError(
    budget ? 'budget-exceeded' : 'rate-limited',
    never ? first : `${first}; retry after ${retrySeconds} s`,
    {
      details,
      headers: {
        ...(never
          ? {}
          : { 'retry-after': String(retrySeconds), 'retry-after-ms': String(Math.ceil(retryMs)) }),
        // A spent budget, or a limit of 0, does not come back within a client's retries: OpenAI's
        // clients stop at once.
        ...(budget || never ? { 'x-should-retry': 'false' } : {}),
        ...rateHeaders(windows),
      },
    },
  );
}
