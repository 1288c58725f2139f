// The limits' names and flags apart from their schema: the CLI defines its options from these,
// and loading TypeBox for that would slow the start of every `kiln` command.

/** Every limit Kiln enforces, by the name it has in config, the CLI and the API. */
export const LIMIT_NAMES = [
  'requests_per_minute',
  'tokens_per_minute',
  'concurrent',
  'tokens_per_day',
  'tokens_per_month',
  'media_seconds_per_day',
] as const;
export type LimitName = (typeof LIMIT_NAMES)[number];

/** Flags of `kiln keys create|update` and `kiln orgs update`, one per limit. */
export const LIMIT_FLAGS: Record<LimitName, string> = {
  requests_per_minute: 'rpm',
  tokens_per_minute: 'tpm',
  concurrent: 'concurrent',
  tokens_per_day: 'tokens-per-day',
  tokens_per_month: 'tokens-per-month',
  media_seconds_per_day: 'media-seconds-per-day',
};
