import type { LookupAddress, LookupOptions } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { Agent, buildConnector, type Dispatcher, request } from 'undici';
import { KilnError } from '../errors.js';
import type { AddressRefusal, CheckUrlOptions, OutboundPolicy } from './policy.js';

/**
 * The one HTTP client for outbound calls (webhook deliveries, image fetches). `checkUrl` vets a
 * URL when it is submitted; this client checks again the address it actually dials, so a name
 * that resolved to a public address then and to 169.254.169.254 now (DNS rebinding) is refused.
 */

/** A connection refused because of where it would go; thrown out of undici's request/fetch. */
export class UnsafeAddressError extends KilnError {
  readonly host: string;
  readonly refusal: AddressRefusal | undefined;

  constructor(host: string, why: string, refusal?: AddressRefusal) {
    super('unsafe-url', `refused to connect to ${host}: ${why}`);
    this.name = 'UnsafeAddressError';
    this.host = host;
    this.refusal = refusal;
  }
}

const wantedFamily = (family: LookupOptions['family']) =>
  family === 4 || family === 'IPv4' ? 4 : family === 6 || family === 'IPv6' ? 6 : 0;

/**
 * A `lookup` for net/tls.connect that resolves through the policy and fails unless every
 * address is allowed, so the check and the dial see the same answer.
 */
export function createSafeLookup(policy: OutboundPolicy): LookupFunction {
  return (hostname, options, callback) => {
    safeAddresses(policy, hostname, wantedFamily(options.family)).then(
      ({ all, first }) => (options.all ? callback(null, all) : callback(null, first.address, first.family)),
      (error: NodeJS.ErrnoException) => callback(error, '', 0),
    );
  };
}

/** The addresses of `host` to dial, of the wanted family (0: any); rejects if any may not be. */
async function safeAddresses(policy: OutboundPolicy, host: string, family: 0 | 4 | 6) {
  const named = policy.refuseHost(host);
  if (named) throw new UnsafeAddressError(host, `it names ${named}`);
  const addresses = await policy.resolve(host);
  for (const address of addresses) {
    const refusal = policy.refuseAddress(host, address);
    if (refusal) throw new UnsafeAddressError(host, `it resolves to ${refusal.reason}`, refusal);
  }
  const all: LookupAddress[] = addresses
    .map((address) => ({ address, family: isIP(address) }))
    .filter((entry) => family === 0 || entry.family === family);
  const first = all[0];
  if (!first) throw Object.assign(new Error(`${host} has no IPv${family} address`), { code: 'ENOTFOUND' });
  return { all, first };
}

export interface OutboundAgentOptions {
  /** Milliseconds to establish the connection; default 10 s. */
  connectTimeout?: number;
  /** Milliseconds to wait for the response headers; undici's default is 300 s. */
  headersTimeout?: number;
  bodyTimeout?: number;
}

/**
 * An undici Agent for `request(url, { dispatcher })`. It follows no redirect: callers see the
 * 3xx (webhooks must not follow them; images use `requestFollowingRedirects`). With undici's
 * `fetch`, pass `redirect: 'manual'`, since fetch follows redirects above the dispatcher.
 */
export function createOutboundAgent(policy: OutboundPolicy, options: OutboundAgentOptions = {}): Agent {
  const dial = buildConnector({
    lookup: createSafeLookup(policy),
    timeout: options.connectTimeout ?? 10_000,
  });
  const connect: buildConnector.connector = (target, callback) => {
    // net.connect skips `lookup` for an IP literal, so a literal is checked here instead.
    const refusal = isIP(target.hostname)
      ? policy.refuseAddress(target.hostname, target.hostname)
      : undefined;
    if (refusal) {
      process.nextTick(
        callback,
        new UnsafeAddressError(target.hostname, `it is ${refusal.reason}`, refusal),
        null,
      );
      return;
    }
    dial(target, callback);
  };
  return new Agent({
    connect,
    ...(options.headersTimeout === undefined ? {} : { headersTimeout: options.headersTimeout }),
    ...(options.bodyTimeout === undefined ? {} : { bodyTimeout: options.bodyTimeout }),
  });
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

export interface FollowOptions extends CheckUrlOptions {
  /** The request field the URL came from, named in a refusal. */
  field: string;
  /** Default 3 (DESIGN section 5). */
  maxRedirects?: number;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * GET for image inputs: follows at most `maxRedirects` redirects, each Location checked with
 * `checkUrl` before it is requested. Answers the final response; the caller reads (and caps) it.
 */
export async function requestFollowingRedirects(
  agent: Dispatcher,
  policy: OutboundPolicy,
  url: string,
  options: FollowOptions,
): Promise<Dispatcher.ResponseData> {
  const { field, maxRedirects = 3 } = options;
  const check = { ...(options.schemes ? { schemes: options.schemes } : {}) };
  let target = await policy.checkUrl(url, field, check);
  for (let redirects = 0; ; redirects++) {
    const response = await request(target, {
      dispatcher: agent,
      method: 'GET',
      ...(options.headers ? { headers: options.headers } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const location = response.headers.location;
    if (!REDIRECTS.has(response.statusCode) || typeof location !== 'string') return response;
    await response.body.dump();
    if (redirects === maxRedirects) {
      const message = `${field} redirects more than ${maxRedirects} times`;
      throw new KilnError('unsafe-url', message, {
        details: [{ field, rule: 'max-redirects', message, received: url, limit: maxRedirects }],
      });
    }
    target = await policy.checkUrl(resolveLocation(location, target), field, check);
  }
}

/** A relative Location is relative to the URL that answered; a malformed one goes to checkUrl as is. */
function resolveLocation(location: string, base: URL): string {
  try {
    return new URL(location, base).href;
  } catch {
    return location;
  }
}
