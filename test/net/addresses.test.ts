import { describe, expect, it } from 'vitest';
import {
  type AddressClass,
  cidrContains,
  classifyAddress,
  embeddedIPv4,
  parseCidr,
  parseIp,
} from '../../src/net/addresses.js';

const classes: Array<[string, AddressClass]> = [
  ['93.184.215.14', 'public'],
  ['8.8.8.8', 'public'],
  ['2606:4700::1111', 'public'],
  ['127.0.0.1', 'loopback'],
  ['127.255.255.254', 'loopback'],
  ['::1', 'loopback'],
  ['10.0.0.1', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['172.32.0.1', 'public'],
  ['192.168.1.1', 'private'],
  ['100.64.0.1', 'private'],
  ['fc00::1', 'private'],
  ['fd12:3456::1', 'private'],
  ['169.254.0.1', 'link-local'],
  ['fe80::1', 'link-local'],
  ['fe80::1%eth0', 'link-local'],
  ['febf::1', 'link-local'],
  ['169.254.169.254', 'metadata'],
  ['fd00:ec2::254', 'metadata'],
  ['100.100.100.200', 'metadata'],
  ['192.0.0.192', 'metadata'],
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['::', 'unspecified'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['ff02::1', 'multicast'],
  ['255.255.255.255', 'broadcast'],
  ['240.0.0.1', 'reserved'],
  ['192.0.2.1', 'reserved'],
  ['2001:db8::1', 'reserved'],
  ['1::', 'reserved'],
  // IPv6 forms carrying an IPv4 address are classified as that address.
  ['::ffff:169.254.169.254', 'metadata'],
  ['::ffff:a9fe:a9fe', 'metadata'],
  ['::ffff:127.0.0.1', 'loopback'],
  ['::ffff:0:a00:1', 'private'],
  ['64:ff9b::a9fe:a9fe', 'metadata'],
  ['64:ff9b::10.0.0.1', 'private'],
  ['64:ff9b::5db8:d70e', 'public'],
  ['::7f00:1', 'loopback'],
  ['2002:a9fe:a9fe::1', 'metadata'],
  ['2002:5db8:d70e::1', 'public'],
];

describe('classifyAddress', () => {
  it.each(classes)('%s is %s', (ip, expected) => {
    expect(classifyAddress(ip)).toBe(expected);
  });

  it('refuses to guess about something that is not an address', () => {
    expect(() => classifyAddress('example.com')).toThrow(TypeError);
  });

  it('reads the IPv4 address inside mapped, NAT64 and 6to4 forms', () => {
    expect(embeddedIPv4('::ffff:a9fe:a9fe')).toBe('169.254.169.254');
    expect(embeddedIPv4('64:ff9b::7f00:1')).toBe('127.0.0.1');
    expect(embeddedIPv4('2002:0a00:0001::')).toBe('10.0.0.1');
    expect(embeddedIPv4('::1')).toBeUndefined();
    expect(embeddedIPv4('2606:4700::1111')).toBeUndefined();
  });
});

describe('parseCidr', () => {
  const contains = (block: string, ip: string) => {
    const cidr = parseCidr(block);
    const address = parseIp(ip);
    if (!cidr || !address) throw new Error(`bad test input ${block} ${ip}`);
    return cidrContains(cidr, address);
  };

  it('matches IPv4 and IPv6 blocks and single addresses', () => {
    expect(contains('10.0.0.0/8', '10.1.2.3')).toBe(true);
    expect(contains('10.0.0.0/8', '11.0.0.1')).toBe(false);
    expect(contains('192.168.4.0/22', '192.168.7.255')).toBe(true);
    expect(contains('192.168.4.0/22', '192.168.8.0')).toBe(false);
    expect(contains('0.0.0.0/0', '93.184.215.14')).toBe(true);
    expect(contains('fc00::/7', 'fdff::1')).toBe(true);
    expect(contains('fc00::/7', 'fe00::1')).toBe(false);
    expect(contains('127.0.0.1', '127.0.0.1')).toBe(true);
    expect(contains('127.0.0.1', '127.0.0.2')).toBe(false);
    expect(contains('[::1]', '::1')).toBe(true);
    expect(contains('10.0.0.0/8', '::ffff:10.0.0.1')).toBe(false);
  });

  it.each(['10.0.0.0/33', '::/129', '10.0.0.0/', '10.0.0.0/8/8', 'example.com/8', '10.0.0/8', '10.0.0.0/-1'])(
    'rejects %s',
    (text) => {
      expect(parseCidr(text)).toBeUndefined();
    },
  );
});
