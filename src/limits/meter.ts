import { wholeUnits } from '../jobs/kinds.js';
import type { JobOutcome } from '../store/types.js';

/** What a job counts against limits: tokens (prompt + completion) and milliseconds of media. */
export interface Metered {
  tokens: number;
  media_ms: number;
}

export interface MeterSettings {
  /** Completion tokens reserved for a request that sets no maximum. */
  default_max_tokens: number;
  /** Seconds of media one image counts as. */
  image_seconds: number;
}

/**
 * How a job kind is metered: reserved from its request at admission, then charged from the usage
 * its job really recorded when it ends.
 */
export interface Meter<Request> {
  reserve(request: Request, settings: MeterSettings): Metered;
  used(usage: JobOutcome['usage'], settings: MeterSettings): Metered;
  /**
   * What a stream stopped by its caller counts when its engine reported no usage, from the events
   * it relayed (capped at the reservation by the caller); a kind without it keeps its reservation.
   */
  relayed?(request: Request, events: number, settings: MeterSettings): Metered;
}

/**
 * A job's count in whole units, as both stores keep them: a request may ask for 1e19 tokens, and a
 * fractional `image_seconds` makes 3 × 0.1 × 1000 = 300.00000000000006 ms.
 */
const metered = (tokens: number, media_ms: number): Metered => ({
  tokens: wholeUnits(tokens),
  media_ms: wholeUnits(media_ms),
});

/** Characters of every string inside `value`: the text a prompt is made of. */
export function textLength(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + textLength(v), 0);
  if (value && typeof value === 'object') return textLength(Object.values(value));
  return 0;
}

/** About four characters a token: the estimate a reservation needs, settled from real usage later. */
export const CHARS_PER_TOKEN = 4;

/** Chat-like kinds: the prompt's estimate plus the completion's maximum (times its choices). */
export function tokenMeter<Request>(
  prompt: (request: Request) => unknown,
  completion: (request: Request) => { max?: unknown; n?: unknown },
  /** Characters the prompt gets beyond `prompt`'s text (a persona's preamble, contexts, a conversation). */
  more: (request: Request) => number = () => 0,
): Meter<Request> {
  const estimate = (request: Request) =>
    Math.ceil((textLength(prompt(request)) + more(request)) / CHARS_PER_TOKEN);
  return {
    reserve(request, settings) {
      const { max, n } = completion(request);
      const most = typeof max === 'number' && max > 0 ? max : settings.default_max_tokens;
      const choices = typeof n === 'number' && n > 1 ? n : 1;
      return metered(estimate(request) + most * choices, 0);
    },
    used: (usage) => metered((usage?.inputUnits ?? 0) + (usage?.outputUnits ?? 0), 0),
    // The prompt's estimate, and a token for each event relayed: an engine streams a token or more
    // an event, and the few events that carry none (the role, the finish, the usage) make up for
    // the last ones generated and not yet relayed.
    relayed: (request, events) => metered(estimate(request) + events, 0),
  };
}

/** Video kinds: the requested duration, then the duration rendered (the ledger's output units, ms). */
export function videoMeter<Request extends { duration_seconds: number }>(): Meter<Request> {
  return {
    reserve: (request) => metered(0, request.duration_seconds * 1000),
    used: (usage) => metered(0, usage?.outputUnits ?? 0),
  };
}

/** Images: each counts `image_seconds` of media, requested then produced (the ledger's output units). */
export function imageMeter<Request extends { n: number }>(): Meter<Request> {
  return {
    reserve: (request, settings) => metered(0, request.n * settings.image_seconds * 1000),
    used: (usage, settings) => metered(0, (usage?.outputUnits ?? 0) * settings.image_seconds * 1000),
  };
}
