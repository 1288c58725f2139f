/**
 * The one error catalogue: every error Kiln reports has a code from this table, which fixes its
 * HTTP status and its `type`. Throw `new KilnError(code, message, extras)` anywhere; the API layer
 * turns it into the envelope `{"error": {type, code, message, param?, details?}}`.
 */

export const errorCatalogue = {
  'validation-failed': { status: 400, type: 'invalid_request_error' },
  'invalid-json': { status: 400, type: 'invalid_request_error' },
  'unsafe-url': { status: 400, type: 'invalid_request_error' },
  unauthorized: { status: 401, type: 'authentication_error' },
  forbidden: { status: 403, type: 'permission_error' },
  'not-found': { status: 404, type: 'not_found_error' },
  'route-not-found': { status: 404, type: 'not_found_error' },
  'model-not-found': { status: 404, type: 'not_found_error' },
  'method-not-allowed': { status: 405, type: 'invalid_request_error' },
  conflict: { status: 409, type: 'conflict_error' },
  'job-already-terminal': { status: 409, type: 'conflict_error' },
  'idempotency-key-in-progress': { status: 409, type: 'conflict_error' },
  'job-expired': { status: 410, type: 'not_found_error' },
  'context-exists': { status: 412, type: 'conflict_error' },
  'context-changed': { status: 412, type: 'conflict_error' },
  'idempotency-key-reused': { status: 422, type: 'invalid_request_error' },
  'request-too-large': { status: 413, type: 'invalid_request_error' },
  'context-too-large': { status: 413, type: 'invalid_request_error' },
  'unsupported-media-type': { status: 415, type: 'invalid_request_error' },
  'range-not-satisfiable': { status: 416, type: 'invalid_request_error' },
  'expectation-failed': { status: 417, type: 'invalid_request_error' },
  // Limits: a rate (requests or tokens per minute, concurrent jobs) or a budget (a day's or month's worth).
  'rate-limited': { status: 429, type: 'rate_limit_error' },
  'budget-exceeded': { status: 429, type: 'insufficient_quota' },
  // Job failures: the `code` of a failed, timed-out or cancelled job's poll body, and the answer
  // to a sync request whose job ended that way.
  cancelled: { status: 409, type: 'conflict_error' },
  // The engine refused the request as the caller's fault (its 4xx): the engine's words, never retried.
  'engine-rejected': { status: 400, type: 'invalid_request_error' },
  // An image input's https:// URL, fetched when the job ran, gave no image (the caller's fault).
  'invalid-image-url': { status: 400, type: 'invalid_request_error' },
  'inference-failed': { status: 502, type: 'server_error' },
  'workflow-model-missing': { status: 502, type: 'server_error' },
  'worker-lost': { status: 502, type: 'server_error' },
  'queue-timeout': { status: 503, type: 'server_error' },
  'run-timeout': { status: 504, type: 'server_error' },
  'engine-unavailable': { status: 503, type: 'server_error' },
  'engine-timeout': { status: 504, type: 'server_error' },
  'store-unavailable': { status: 503, type: 'server_error' },
  'shutting-down': { status: 503, type: 'server_error' },
  'internal-error': { status: 500, type: 'server_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof errorCatalogue;

/** One entry of `details`: which field broke which rule, and what was expected. */
export interface ErrorDetail {
  field: string;
  rule: string;
  message: string;
  received?: unknown;
  allowed?: unknown;
  limit?: number;
  /** Limits: whose counter (`key`, `org`), how much of it is used, when it frees room. */
  scope?: string;
  used?: number;
  resets_at?: string;
  retry_after_ms?: number;
  /** An engine's own error fields (`engine-rejected`): its `type`, `param`, counts, verbatim. */
  engine?: Record<string, unknown>;
}

export interface ErrorBody {
  type: string;
  code: string;
  message: string;
  /** Always sent by Kiln (null when no field applies); optional for bodies read from elsewhere. */
  param?: string | null;
  details?: ErrorDetail[];
}

export class KilnError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly param: string | undefined;
  readonly details: ErrorDetail[] | undefined;
  /** Top-level fields sent beside `error`, e.g. the job a 409 `job-already-terminal` is about. */
  readonly attach: Record<string, unknown> | undefined;
  /** Response headers the answer carries (a 429's `Retry-After`). */
  readonly headers: Record<string, string> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    extras: {
      /** The field at fault; by default the first detail's; null when none applies, whatever the details say. */
      param?: string | null;
      details?: ErrorDetail[];
      cause?: unknown;
      attach?: Record<string, unknown>;
      headers?: Record<string, string>;
    } = {},
  ) {
    super(message, extras.cause === undefined ? undefined : { cause: extras.cause });
    this.name = 'KilnError';
    this.code = code;
    this.status = errorCatalogue[code].status;
    this.param = extras.param === null ? undefined : (extras.param ?? extras.details?.[0]?.field);
    this.details = extras.details;
    this.attach = extras.attach;
    this.headers = extras.headers;
  }

  toBody(): ErrorBody {
    // `param` is always there, null when no field applies, as OpenAI's error schema requires.
    const body: ErrorBody = {
      type: errorCatalogue[this.code].type,
      code: this.code,
      message: this.message,
      param: this.param ?? null,
    };
    if (this.details !== undefined) body.details = this.details;
    return body;
  }
}

/** A 400 `validation-failed` from one or more details; the message summarises the first. */
export function validationError(details: ErrorDetail[]): KilnError {
  const first = details[0];
  const more = details.length > 1 ? ` (and ${details.length - 1} more problem(s), see details)` : '';
  return new KilnError('validation-failed', `${first ? first.message : 'invalid request'}${more}`, {
    details,
  });
}

export function notFound(what: string, id: string): KilnError {
  return new KilnError('not-found', `no ${what} '${id}' in this organisation`);
}
