import { Type } from '@sinclair/typebox';

/**
 * The longest duration a timer is given: Node's timers hold at most 2^31 − 1 ms (24.8 days), and
 * fire at once, after 1 ms, for anything longer.
 */
export const TIMER_MAX_MS = 24 * 86_400_000;

/**
 * A config value that is a duration such as 250ms, 5s, 2m, 1h or 7d; `parseDuration` reads it. One
 * a timer waits for (most) is at most TIMER_MAX_MS (the `maxMs` keyword, checked by loadConfig);
 * a retention or a URL's lifetime, only compared with dates, is not (`timer: false`).
 */
export function Duration(
  fallback: string,
  description: string,
  { timer = true, minMs }: { timer?: boolean; minMs?: number } = {},
) {
  return Type.String({
    default: fallback,
    pattern: '^[0-9]+(ms|s|m|h|d)$',
    allowed: 'a duration such as 250ms, 5s, 2m, 1h or 7d',
    ...(timer ? { maxMs: TIMER_MAX_MS } : {}),
    ...(minMs !== undefined ? { minMs } : {}),
    description,
  });
}

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Milliseconds of a duration the schema has already validated. */
export function parseDuration(text: string): number {
  const match = /^([0-9]+)(ms|s|m|h|d)$/.exec(text);
  if (!match) throw new Error(`not a duration: ${text}`);
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
}
