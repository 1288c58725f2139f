import { isIP } from 'node:net';

/**
 * Pure classification of IP addresses, for deciding which ones an outbound call may reach.
 * Addresses are handled as bigints so that one CIDR test serves IPv4 and IPv6 alike.
 */

export type AddressClass =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'metadata'
  | 'unspecified'
  | 'multicast'
  | 'broadcast'
  | 'reserved';

/**
 * Classes no configuration can open. Cloud credentials live behind link-local and metadata
 * addresses, and the rest never name one real receiver.
 */
export const NEVER_ALLOWED: ReadonlySet<AddressClass> = new Set([
  'link-local',
  'metadata',
  'unspecified',
  'multicast',
  'broadcast',
  'reserved',
]);

export interface IpAddress {
  family: 4 | 6;
  value: bigint;
}

export interface Cidr {
  family: 4 | 6;
  bits: number;
  /** The address shifted right so that only its first `bits` bits remain. */
  prefix: bigint;
}

const widthOf = (family: 4 | 6) => (family === 4 ? 32 : 128);

function ipv4Value(text: string): bigint {
  return text.split('.').reduce((value, octet) => (value << 8n) | BigInt(octet), 0n);
}

/** Expands `::` and a trailing dotted quad; the input is already known to be valid IPv6. */
function ipv6Value(text: string): bigint {
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  let hex = text;
  if (quad !== undefined) {
    const v4 = ipv4Value(quad);
    hex = `${text.slice(0, -quad.length)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head = '', tail] = hex.split('::');
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const zeros = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...zeros, ...right].reduce((value, group) => (value << 16n) | BigInt(`0x${group}`), 0n);
}

/** Parses an IP address as DNS or a URL host gives it (brackets and an IPv6 zone are dropped). */
export function parseIp(text: string): IpAddress | undefined {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  const ip = bare.split('%')[0] ?? '';
  switch (isIP(ip)) {
    case 4:
      return { family: 4, value: ipv4Value(ip) };
    case 6:
      return { family: 6, value: ipv6Value(ip) };
    default:
      return undefined;
  }
}

/** `10.0.0.0/8`, `fc00::/7`, or a bare address (a single-address block); undefined if malformed. */
export function parseCidr(text: string): Cidr | undefined {
  const [address = '', length, ...extra] = text.trim().split('/');
  const ip = parseIp(address);
  if (!ip || extra.length > 0) return undefined;
  const width = widthOf(ip.family);
  const bits = length === undefined ? width : /^\d{1,3}$/.test(length) ? Number(length) : -1;
  if (bits < 0 || bits > width) return undefined;
  return { family: ip.family, bits, prefix: ip.value >> BigInt(width - bits) };
}

export function cidrContains(cidr: Cidr, ip: IpAddress): boolean {
  return cidr.family === ip.family && ip.value >> BigInt(widthOf(ip.family) - cidr.bits) === cidr.prefix;
}

function cidr(text: string): Cidr {
  const parsed = parseCidr(text);
  if (!parsed) throw new Error(`bad built-in CIDR ${text}`);
  return parsed;
}

const low32 = (value: bigint) => value & 0xffffffffn;

/**
 * IPv6 forms that carry an IPv4 address, which is where a packet to them ends up: mapped and
 * translated forms reach it directly, NAT64 and 6to4 through a gateway that may sit inside the
 * network.
 */
const IPV4_CARRIERS: Array<[Cidr, (value: bigint) => bigint]> = [
  [cidr('::ffff:0:0/96'), low32], // IPv4-mapped
  [cidr('::ffff:0:0:0/96'), low32], // IPv4-translated (SIIT)
  [cidr('64:ff9b::/96'), low32], // NAT64 well-known prefix
  [cidr('2002::/16'), (value) => low32(value >> 80n)], // 6to4
  [cidr('::/96'), low32], // IPv4-compatible (deprecated); :: and ::1 are excluded below
];

function carriedIPv4(ip: IpAddress): IpAddress | undefined {
  if (ip.family !== 6 || ip.value <= 1n) return undefined;
  const carrier = IPV4_CARRIERS.find(([range]) => cidrContains(range, ip));
  return carrier ? { family: 4, value: carrier[1](ip.value) } : undefined;
}

/** The IPv4 address an IPv6 form carries (mapped, translated, NAT64, 6to4, compatible), if any. */
export function embeddedIPv4(text: string): string | undefined {
  const parsed = parseIp(text);
  const v4 = parsed && carriedIPv4(parsed);
  return v4 && [24n, 16n, 8n, 0n].map((shift) => (v4.value >> shift) & 0xffn).join('.');
}

/** First match wins, so single addresses come before the blocks that contain them. */
const IPV4_CLASSES: Array<[Cidr, AddressClass]> = (
  [
    ['169.254.169.254/32', 'metadata'], // AWS, GCP, Azure, OCI, DigitalOcean, OpenStack…
    ['169.254.170.2/32', 'metadata'], // AWS ECS task credentials
    ['169.254.0.23/32', 'metadata'], // Tencent Cloud
    ['100.100.100.200/32', 'metadata'], // Alibaba Cloud
    ['192.0.0.192/32', 'metadata'], // Oracle Cloud (classic)
    ['0.0.0.0/8', 'unspecified'], // "this network": 0.0.0.0 reaches the local host on Linux
    ['10.0.0.0/8', 'private'],
    ['100.64.0.0/10', 'private'], // carrier-grade NAT
    ['127.0.0.0/8', 'loopback'],
    ['169.254.0.0/16', 'link-local'],
    ['172.16.0.0/12', 'private'],
    ['192.0.0.0/24', 'reserved'], // IETF protocol assignments
    ['192.0.2.0/24', 'reserved'], // documentation
    ['192.88.99.0/24', 'reserved'], // 6to4 relay anycast, deprecated
    ['192.168.0.0/16', 'private'],
    // Benchmarking, but also where "fake-ip" local DNS proxies answer, so it must be allowable.
    ['198.18.0.0/15', 'private'],
    ['198.51.100.0/24', 'reserved'], // documentation
    ['203.0.113.0/24', 'reserved'], // documentation
    ['224.0.0.0/4', 'multicast'],
    ['255.255.255.255/32', 'broadcast'],
    ['240.0.0.0/4', 'reserved'],
  ] as const
).map(([range, kind]) => [cidr(range), kind]);

const IPV6_CLASSES: Array<[Cidr, AddressClass]> = (
  [
    ['::/128', 'unspecified'],
    ['::1/128', 'loopback'],
    ['fd00:ec2::254/128', 'metadata'], // AWS IMDS over IPv6
    ['fd20:ce::254/128', 'metadata'], // GCP metadata over IPv6
    ['64:ff9b:1::/48', 'reserved'], // local-use NAT64: the IPv4 behind it cannot be read reliably
    ['100::/64', 'reserved'], // discard-only
    ['2001:db8::/32', 'reserved'], // documentation
    ['2001::/23', 'reserved'], // IETF protocol assignments (Teredo, ORCHID, benchmarking…)
    ['3fff::/20', 'reserved'], // documentation
    ['5f00::/16', 'reserved'], // SRv6 segment identifiers
    ['fc00::/7', 'private'], // unique local
    ['fe80::/10', 'link-local'],
    ['fec0::/10', 'private'], // site-local, deprecated
    ['ff00::/8', 'multicast'],
  ] as const
).map(([range, kind]) => [cidr(range), kind]);

/** Everything outside global unicast is not yet assigned, so it is nobody's public receiver. */
const GLOBAL_UNICAST = cidr('2000::/3');

/** The class of an address; an IPv6 form carrying an IPv4 address has the IPv4 address's class. */
export function classifyAddress(text: string): AddressClass {
  const parsed = parseIp(text);
  if (!parsed) throw new TypeError(`not an IP address: ${text}`);
  const ip = carriedIPv4(parsed) ?? parsed;
  const table = ip.family === 4 ? IPV4_CLASSES : IPV6_CLASSES;
  const match = table.find(([range]) => cidrContains(range, ip));
  if (match) return match[1];
  return ip.family === 4 || cidrContains(GLOBAL_UNICAST, ip) ? 'public' : 'reserved';
}
