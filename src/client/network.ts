import type { ErrorBody } from '../errors.js';

/** Why fetch got no answer, by the code undici or the OS gives, in the words a user can act on. */
const REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused, nothing is listening there',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name could not be looked up (DNS did not answer)',
  ETIMEDOUT: 'the connection timed out',
  UND_ERR_CONNECT_TIMEOUT: 'the connection timed out',
  EHOSTUNREACH: 'the host is unreachable',
  ENETUNREACH: 'the network is unreachable',
  ECONNRESET: 'the connection was reset before any answer',
  UND_ERR_SOCKET: 'the connection was closed before any answer',
  UND_ERR_HEADERS_TIMEOUT: 'no answer came in time',
  UND_ERR_BODY_TIMEOUT: 'the answer stopped coming in time',
};

/** A URL as shown in messages: no credentials, no query (a signed URL's signature stays out of sight). */
export function shownUrl(url: URL | string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname === '/' ? '' : parsed.pathname}`;
  } catch {
    return String(url).replace(/[?#].*$/, '');
  }
}

/**
 * A request that got no HTTP answer at all (nothing listening, unknown host, timeout): unlike a
 * KilnApiError, the gateway was never heard from, so its logs have nothing to say about it.
 */
export class GatewayUnreachableError extends Error {
  readonly code = 'gateway-unreachable';

  constructor(
    /** The URL tried, without its query. */
    readonly url: string,
    /** Why no answer came, e.g. "connection refused, nothing is listening there (ECONNREFUSED)". */
    readonly reason: string,
    /** What to check, e.g. whether `kiln serve` runs at the base URL; may be empty. */
    readonly hint: string,
  ) {
    super(`could not connect to ${url}: ${reason}${hint ? `. ${hint}` : ''}`);
    this.name = 'GatewayUnreachableError';
  }

  toBody(): ErrorBody {
    return { type: 'connection_error', code: this.code, message: this.message };
  }
}

/** The code of a failed fetch's cause (the first of several addresses tried, when there were several). */
function causeCode(error: unknown): { code: string | undefined; message: string | undefined } {
  const cause = (error as { cause?: { code?: unknown; message?: unknown; errors?: unknown[] } }).cause;
  if (!cause || typeof cause !== 'object') return { code: undefined, message: undefined };
  const first = Array.isArray(cause.errors) ? (cause.errors[0] as { code?: unknown } | undefined) : undefined;
  const code = typeof cause.code === 'string' ? cause.code : first?.code;
  return {
    code: typeof code === 'string' ? code : undefined,
    message: typeof cause.message === 'string' ? cause.message : undefined,
  };
}

/**
 * `error` as a GatewayUnreachableError when it is fetch failing to get any answer from `url`
 * (undici's `TypeError: fetch failed`); anything else (an abort, a URL that does not parse) as it is.
 */
export function explainFetchFailure(error: unknown, url: URL | string, hint: string): unknown {
  // 'terminated': the answer began, then its body failed (undici's body timeout, a reset).
  if (!(error instanceof TypeError) || (error.message !== 'fetch failed' && error.message !== 'terminated'))
    return error;
  const { code, message } = causeCode(error);
  const words = code ? REASONS[code] : undefined;
  const reason = words
    ? `${words} (${code})`
    : message === 'bad port'
      ? 'fetch refuses to connect to this port (one reserved for other protocols)'
      : (code ?? message ?? 'fetch failed');
  return new GatewayUnreachableError(shownUrl(url), reason, hint);
}
