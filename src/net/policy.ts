import dns from 'node:dns';
import { isIP } from 'node:net';
import { ConfigError } from '../config/error.js';
import type { Config } from '../config/schema.js';
import { KilnError } from '../errors.js';
import {
  type AddressClass,
  type Cidr,
  cidrContains,
  classifyAddress,
  embeddedIPv4,
  NEVER_ALLOWED,
  parseCidr,
  parseIp,
} from './addresses.js';

/**
 * Which outbound URLs Kiln may call (webhook receivers, image inputs): built once from
 * `security`, used by `checkUrl` before a job is enqueued and by the outbound HTTP client again
 * at connection time (see http.ts), so that both answer the same way.
 */
export interface OutboundPolicy {
  /**
   * Answers the parsed URL when Kiln may call it; otherwise throws a 400 `unsafe-url` whose
   * details name `field`. Resolves the host, and refuses if any of its addresses is unsafe.
   */
  checkUrl(url: string, field: string, options?: CheckUrlOptions): Promise<URL>;
  /** Every address of a host name, from the configured DNS servers or the system resolver. */
  resolve(host: string): Promise<string[]>;
  /** Why a host may not be called whatever it resolves to (a metadata service name), if so. */
  refuseHost(host: string): string | undefined;
  /** Why `host` may not be reached at `address`, if so; `reason` reads "10.0.0.1, a private address …". */
  refuseAddress(host: string, address: string): AddressRefusal | undefined;
}

export interface CheckUrlOptions {
  /** URL schemes accepted, with their colon; default http: and https:. Image inputs pass ['https:']. */
  schemes?: readonly string[];
}

export interface AddressRefusal {
  address: string;
  addressClass: AddressClass;
  reason: string;
}

/**
 * Names that reach a cloud metadata service from inside the cloud; refused before DNS, since
 * the answer only matters where it would be dangerous.
 */
const METADATA_HOSTS: ReadonlySet<string> = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'metadata.azure.internal',
  'metadata.azure.com',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.tencentyun.com',
  'metadata.platformequinix.com',
]);

const DEFAULT_SCHEMES = ['http:', 'https:'] as const;
const HOST_NAME = /^(?=.*[a-z])[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

const CLASS_WORDS: Record<AddressClass, string> = {
  public: 'a public address',
  loopback: 'a loopback address',
  private: 'a private address',
  'link-local': 'a link-local address',
  metadata: 'a cloud metadata address',
  unspecified: 'an unspecified address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  reserved: 'a reserved address',
};

/** URL host → the name or address it stands for: no IPv6 brackets, no trailing root dot. */
const bareHost = (host: string) => host.replace(/^\[(.*)\]$/, '$1').replace(/\.+$/, '');

interface AllowList {
  names: ReadonlySet<string>;
  blocks: readonly Cidr[];
}

function parseAllowHosts(entries: readonly string[]): AllowList & { problems: string[] } {
  const names = new Set<string>();
  const blocks: Cidr[] = [];
  const problems: string[] = [];
  entries.forEach((entry, i) => {
    const block = parseCidr(bareHost(entry.trim()));
    const name = bareHost(entry.trim().toLowerCase());
    if (block) blocks.push(block);
    else if (HOST_NAME.test(name)) names.add(name);
    else
      problems.push(
        `security.allow_hosts[${i}]: '${entry}' is neither a host name nor an IP address or CIDR`,
      );
  });
  return { names, blocks, problems };
}

/** What is wrong with `allow_hosts` and `dns_servers`, for loadConfig to say with the rest. */
export function securityProblems(security: Config['security']): string[] {
  const problems = parseAllowHosts(security.allow_hosts).problems;
  if (security.dns_servers.length > 0) {
    try {
      new dns.promises.Resolver().setServers(security.dns_servers);
    } catch (error) {
      problems.push(`security.dns_servers: ${(error as Error).message}`);
    }
  }
  return problems;
}

type Resolve = (host: string) => Promise<string[]>;

const systemResolve: Resolve = async (host) =>
  (await dns.promises.lookup(host, { all: true })).map((entry) => entry.address);

/** A and AAAA from the given servers; one family failing is fine as long as the other answers. */
function serversResolve(servers: readonly string[]): Resolve {
  const resolver = new dns.promises.Resolver({ timeout: 2000, tries: 2 });
  try {
    resolver.setServers(servers);
  } catch (error) {
    throw new ConfigError([`security.dns_servers: ${(error as Error).message}`]);
  }
  return async (host) => {
    const answers = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    const addresses = answers.flatMap((answer) => (answer.status === 'fulfilled' ? answer.value : []));
    if (addresses.length > 0) return addresses;
    const failures = answers.flatMap((answer) => (answer.status === 'rejected' ? [answer.reason] : []));
    // "No such name" says more than "no records of this type", so it wins.
    throw (
      failures.find((error) => error?.code !== 'ENODATA') ??
      failures[0] ??
      Object.assign(new Error(`${host} has no addresses`), { code: 'ENODATA' })
    );
  };
}

/** Builds the policy once from the validated configuration; a malformed entry is a ConfigError. */
export function createOutboundPolicy(security: Config['security']): OutboundPolicy {
  const allow = parseAllowHosts(security.allow_hosts);
  if (allow.problems.length > 0) throw new ConfigError(allow.problems);
  const resolve = security.dns_servers.length > 0 ? serversResolve(security.dns_servers) : systemResolve;

  const allowed = (host: string, address: string) => {
    if (allow.names.has(bareHost(host).toLowerCase())) return true;
    // A mapped or NAT64 form of an allowed IPv4 address is allowed too: it reaches the same place.
    return [address, embeddedIPv4(address)].some((form) => {
      const ip = form === undefined ? undefined : parseIp(form);
      return ip !== undefined && allow.blocks.some((block) => cidrContains(block, ip));
    });
  };

  const refuseHost = (host: string) => {
    const name = bareHost(host).toLowerCase();
    return METADATA_HOSTS.has(name) ? `${name}, a cloud metadata service` : undefined;
  };

  const refuseAddress = (host: string, address: string): AddressRefusal | undefined => {
    const addressClass = classifyAddress(address);
    if (addressClass === 'public') return undefined;
    const v4 = embeddedIPv4(address);
    const shown = v4 === undefined ? address : `${address} (IPv4 ${v4})`;
    const words = CLASS_WORDS[addressClass];
    if (NEVER_ALLOWED.has(addressClass)) {
      const listed = allowed(host, address) ? ', which security.allow_hosts cannot allow' : '';
      return { address, addressClass, reason: `${shown}, ${words}${listed}` };
    }
    if (allowed(host, address)) return undefined;
    return { address, addressClass, reason: `${shown}, ${words} not listed in security.allow_hosts` };
  };

  const checkUrl = async (url: string, field: string, options: CheckUrlOptions = {}) => {
    const refuse = (rule: string, message: string, extra: { allowed?: unknown } = {}) =>
      new KilnError('unsafe-url', message, {
        details: [{ field, rule, message, received: redacted(url), ...extra }],
      });

    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw refuse('url', `${field} is not an absolute URL`);
    }
    const schemes = options.schemes ?? DEFAULT_SCHEMES;
    if (!schemes.includes(parsed.protocol)) {
      const list = schemes.map((s) => s.replace(/:$/, '')).join(' or ');
      throw refuse('scheme', `${field} must be an ${list} URL, not ${parsed.protocol}`, { allowed: schemes });
    }
    if (parsed.username !== '' || parsed.password !== '') {
      throw refuse('userinfo', `${field} must not carry a user name or password`);
    }
    // Port 0 can be written in a URL but never connected to: the job would exist and never be told.
    if (parsed.port === '0') throw refuse('port', `${field} names port 0, which nothing can listen on`);

    // WHATWG URL has already turned decimal, octal and hex spellings into a dotted quad.
    const host = bareHost(parsed.hostname);
    const literal = isIP(host) !== 0;
    const namedMetadata = literal ? undefined : refuseHost(host);
    if (namedMetadata) throw refuse('unsafe-url', `${field} names ${namedMetadata}`);

    let addresses: string[];
    try {
      addresses = literal ? [host] : await resolve(host);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      throw refuse('unresolvable', `${field} names ${host}, which does not resolve (${code})`);
    }
    for (const address of addresses) {
      const refusal = refuseAddress(host, address);
      if (refusal)
        throw refuse('unsafe-url', `${field} ${literal ? 'points at' : 'resolves to'} ${refusal.reason}`);
    }
    return parsed;
  };

  return { checkUrl, resolve, refuseHost, refuseAddress };
}

/** The URL as received, without a password, short enough for an error body. */
function redacted(url: string): string {
  let shown = url;
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') {
      parsed.password = '***';
      shown = parsed.href;
    }
  } catch {
    // Not a URL: shown as given, there is no password to find in it.
  }
  return shown.length > 200 ? `${shown.slice(0, 200)}…` : shown;
}
