import { type Static, Type } from '@sinclair/typebox';
import { LIMIT_NAMES, type LimitName } from './names.js';

export { LIMIT_FLAGS, LIMIT_NAMES, type LimitName } from './names.js';

/** Rates refuse with `rate-limited`; budgets (a day's or a month's worth) with `budget-exceeded`. */
export const BUDGETS: ReadonlySet<LimitName> = new Set([
  'tokens_per_day',
  'tokens_per_month',
  'media_seconds_per_day',
]);

const count = (description: string) =>
  Type.Optional(Type.Integer({ minimum: 0, maximum: 1e12, description }));

/** A set of limits; one that is absent does not apply. */
export const LimitsSchema = Type.Object(
  {
    requests_per_minute: count('requests admitted in any 60 seconds'),
    tokens_per_minute: count('prompt + completion tokens in any 60 seconds'),
    concurrent: count('jobs queued or running at once'),
    tokens_per_day: count('prompt + completion tokens per UTC day'),
    tokens_per_month: count('prompt + completion tokens per UTC calendar month'),
    media_seconds_per_day: count(
      'seconds of video rendered per UTC day (an image counts limits.image_seconds)',
    ),
  },
  { additionalProperties: false, default: {} },
);
export type Limits = Static<typeof LimitsSchema>;

/** A stored limits column (JSON text or null) as limits; anything unreadable is no limit. */
export function parseLimits(text: string | null | undefined): Limits {
  if (!text) return {};
  try {
    const value = JSON.parse(text) as Record<string, unknown>;
    const limits: Limits = {};
    for (const name of LIMIT_NAMES) {
      const n = value[name];
      if (typeof n === 'number' && Number.isInteger(n) && n >= 0) limits[name] = n;
    }
    return limits;
  } catch {
    return {};
  }
}

/** The tighter of two sets of limits, limit by limit. */
export function tightest(a: Limits, b: Limits): Limits {
  const out: Limits = {};
  for (const name of LIMIT_NAMES) {
    const x = a[name];
    const y = b[name];
    const n = x === undefined ? y : y === undefined ? x : Math.min(x, y);
    if (n !== undefined) out[name] = n;
  }
  return out;
}

export const hasLimits = (limits: Limits) => LIMIT_NAMES.some((name) => limits[name] !== undefined);
