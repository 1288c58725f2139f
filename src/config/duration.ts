import { Type } from '@sinclair/typebox';

/** A config value that is a duration such as 250ms, 5s, 2m, 1h or 7d; `parseDuration` reads it. */
export function Duration(fallback: string, description: string) {
  return Type.String({
    default: fallback,
    pattern: '^[0-9]+(ms|s|m|h|d)$',
    allowed: 'a duration such as 250ms, 5s, 2m, 1h or 7d',
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
