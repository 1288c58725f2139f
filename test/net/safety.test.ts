import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/load.js';
import { KilnError } from '../../src/errors.js';
import { createOutboundPolicy, type OutboundPolicy } from '../../src/net/policy.js';
import { startTestDns, type TestDns } from '../helpers/dns.js';

// Every name below is answered by the test DNS server on 127.0.0.1; checkUrl never connects.
let dns: TestDns;
let strict: OutboundPolicy;
let permissive: OutboundPolicy;

beforeAll(async () => {
  dns = await startTestDns({
    localhost: ['127.0.0.1'],
    'public.test': ['93.184.215.14'],
    'public6.test': ['2606:4700::1111'],
    'dual.test': ['93.184.215.14', '2606:4700::1111'],
    'link-local.test': ['169.254.10.1'],
    'imds.test': ['169.254.169.254'],
    'loopback.test': ['127.0.0.1'],
    'private.test': ['10.0.0.5'],
    'mixed.test': ['93.184.215.14', '10.0.0.1'],
    'aaaa-metadata.test': ['93.184.215.14', 'fd00:ec2::254'],
    'mapped.test': ['::ffff:169.254.169.254'],
    'multicast.test': ['224.0.0.251'],
    'empty.test': [],
    'receiver.onprem.test': ['192.168.5.5'],
  });
  strict = createOutboundPolicy({ allow_hosts: [], dns_servers: [dns.server] });
  permissive = createOutboundPolicy({
    allow_hosts: [
      '127.0.0.1',
      '::1',
      '10.0.0.0/8',
      'fc00::/7',
      'Receiver.OnPrem.test',
      // Listed, and still never allowed:
      '169.254.0.0/16',
      'metadata.google.internal',
      'link-local.test',
      '0.0.0.0/8',
    ],
    dns_servers: [dns.server],
  });
});

afterAll(async () => {
  await dns.close();
});

async function refusal(policy: OutboundPolicy, url: string, field: string, schemes?: string[]) {
  try {
    await policy.checkUrl(url, field, schemes ? { schemes } : {});
  } catch (error) {
    if (error instanceof KilnError) return error;
    throw error;
  }
  throw new Error(`${url} was accepted`);
}

/** [url, the rule in details[0], words the message must contain] */
const unsafe: Array<[string, string, string]> = [
  ['http://169.254.169.254/latest/meta-data', 'unsafe-url', 'points at 169.254.169.254, a cloud metadata'],
  ['http://[fd00:ec2::254]/', 'unsafe-url', 'fd00:ec2::254, a cloud metadata address'],
  ['http://[::ffff:169.254.169.254]/', 'unsafe-url', '(IPv4 169.254.169.254), a cloud metadata address'],
  ['http://[::ffff:a9fe:a9fe]/', 'unsafe-url', 'a cloud metadata address'],
  ['http://[64:ff9b::a9fe:a9fe]/', 'unsafe-url', 'a cloud metadata address'],
  ['http://[2002:a9fe:a9fe::1]/', 'unsafe-url', 'a cloud metadata address'],
  ['http://[::169.254.169.254]/', 'unsafe-url', 'a cloud metadata address'],
  ['http://2852039166/', 'unsafe-url', '169.254.169.254, a cloud metadata address'],
  ['http://0251.0376.0251.0376/', 'unsafe-url', '169.254.169.254, a cloud metadata address'],
  ['http://0xa9fea9fe/', 'unsafe-url', '169.254.169.254, a cloud metadata address'],
  ['http://169.254.43518/', 'unsafe-url', '169.254.169.254, a cloud metadata address'],
  [
    'http://metadata.google.internal/computeMetadata/',
    'unsafe-url',
    'metadata.google.internal, a cloud metadata',
  ],
  ['http://METADATA.Google.Internal./', 'unsafe-url', 'a cloud metadata service'],
  ['http://metadata/', 'unsafe-url', 'a cloud metadata service'],
  ['http://instance-data/latest/', 'unsafe-url', 'a cloud metadata service'],
  ['http://100.100.100.200/latest/meta-data', 'unsafe-url', 'a cloud metadata address'],
  ['http://192.0.0.192/', 'unsafe-url', 'a cloud metadata address'],
  ['http://[fe80::1]/', 'unsafe-url', 'fe80::1, a link-local address'],
  ['http://169.254.1.1/', 'unsafe-url', 'a link-local address'],
  ['http://link-local.test/', 'unsafe-url', 'resolves to 169.254.10.1, a link-local address'],
  ['http://imds.test/latest/meta-data', 'unsafe-url', 'resolves to 169.254.169.254, a cloud metadata'],
  ['http://mapped.test/', 'unsafe-url', 'a cloud metadata address'],
  ['http://aaaa-metadata.test/', 'unsafe-url', 'resolves to fd00:ec2::254'],
  ['http://mixed.test/', 'unsafe-url', 'resolves to 10.0.0.1, a private address'],
  ['http://0.0.0.0/', 'unsafe-url', 'an unspecified address'],
  ['http://0/', 'unsafe-url', 'an unspecified address'],
  ['http://[::]/', 'unsafe-url', 'an unspecified address'],
  ['http://127.0.0.1/', 'unsafe-url', '127.0.0.1, a loopback address not listed in security.allow_hosts'],
  ['http://127.1:8080/', 'unsafe-url', 'a loopback address'],
  ['http://0x7f000001/', 'unsafe-url', 'a loopback address'],
  ['http://localhost:3000/hook', 'unsafe-url', 'resolves to 127.0.0.1, a loopback address'],
  ['http://loopback.test/', 'unsafe-url', 'a loopback address'],
  ['http://[::1]/', 'unsafe-url', 'a loopback address'],
  ['http://[::ffff:127.0.0.1]/', 'unsafe-url', 'a loopback address'],
  ['http://10.0.0.1/', 'unsafe-url', 'a private address not listed in security.allow_hosts'],
  ['http://192.168.1.1/', 'unsafe-url', 'a private address'],
  ['http://172.16.0.1/', 'unsafe-url', 'a private address'],
  ['http://100.64.0.1/', 'unsafe-url', 'a private address'],
  ['http://private.test/', 'unsafe-url', 'resolves to 10.0.0.5, a private address'],
  ['http://[fc00::1]/', 'unsafe-url', 'a private address'],
  ['http://224.0.0.1/', 'unsafe-url', 'a multicast address'],
  ['http://[ff02::1]/', 'unsafe-url', 'a multicast address'],
  ['http://multicast.test/', 'unsafe-url', 'a multicast address'],
  ['http://255.255.255.255/', 'unsafe-url', 'the broadcast address'],
  ['http://240.0.0.1/', 'unsafe-url', 'a reserved address'],
  ['http://192.0.2.10/', 'unsafe-url', 'a reserved address'],
  ['ftp://public.test/file', 'scheme', 'must be an http or https URL, not ftp:'],
  ['file:///etc/passwd', 'scheme', 'not file:'],
  ['gopher://public.test/', 'scheme', 'not gopher:'],
  ['javascript:alert(1)', 'scheme', 'not javascript:'],
  ['http://user:secret@public.test/', 'userinfo', 'must not carry a user name or password'],
  ['http://user@public.test/', 'userinfo', 'must not carry a user name or password'],
  ['http://public.test:0/hook', 'port', 'names port 0, which nothing can listen on'],
  ['https://public.test:00/hook', 'port', 'names port 0'],
  ['http://nowhere.test/', 'unresolvable', 'nowhere.test, which does not resolve'],
  ['http://empty.test/', 'unresolvable', 'does not resolve'],
  ['not a url', 'url', 'is not an absolute URL'],
  ['/relative/path', 'url', 'is not an absolute URL'],
];

describe('checkUrl refuses', () => {
  it.each(unsafe)('%s (%s)', async (url, rule, words) => {
    const error = await refusal(strict, url, 'webhook.url');
    expect(error.code).toBe('unsafe-url');
    expect(error.status).toBe(400);
    expect(error.param).toBe('webhook.url');
    expect(error.details?.[0]).toMatchObject({ field: 'webhook.url', rule, received: expect.any(String) });
    expect(error.message).toContain(words);
    expect(error.message.startsWith('webhook.url ')).toBe(true);
    expect(error.toBody()).toMatchObject({ code: 'unsafe-url', type: 'invalid_request_error' });
  });

  it('names the field it was given, e.g. an image input', async () => {
    const error = await refusal(strict, 'https://[fe80::1]/a.png', 'start_image');
    expect(error.details?.[0]).toMatchObject({ field: 'start_image', rule: 'unsafe-url' });
    expect(error.message).toBe('start_image points at fe80::1, a link-local address');
  });

  it('takes the schemes a caller allows: image inputs are https only', async () => {
    const error = await refusal(strict, 'http://public.test/a.png', 'end_image', ['https:']);
    expect(error.details?.[0]).toMatchObject({ field: 'end_image', rule: 'scheme', allowed: ['https:'] });
    expect(error.message).toBe('end_image must be an https URL, not http:');
  });

  it('never echoes a password back', async () => {
    const error = await refusal(strict, 'http://user:secret@public.test/', 'webhook.url');
    expect(error.details?.[0]?.received).toBe('http://user:***@public.test/');
  });

  it.each([
    'http://169.254.169.254/',
    'http://[::ffff:169.254.169.254]/',
    'http://169.254.1.1/',
    'http://link-local.test/',
    'http://metadata.google.internal/',
    'http://0.0.0.0/',
    'http://[fe80::1]/',
    'http://192.168.1.1/',
  ])('%s even when allow_hosts lists what it can', async (url) => {
    const error = await refusal(permissive, url, 'webhook.url');
    expect(error.code).toBe('unsafe-url');
  });

  it('says when allow_hosts lists an address it cannot allow', async () => {
    const error = await refusal(permissive, 'http://169.254.1.1/', 'webhook.url');
    expect(error.message).toBe(
      'webhook.url points at 169.254.1.1, a link-local address, which security.allow_hosts cannot allow',
    );
  });

  it('asks the system resolver when no DNS server is configured', async () => {
    const system = createOutboundPolicy({ allow_hosts: [], dns_servers: [] });
    const error = await refusal(system, 'http://localhost/', 'webhook.url');
    expect(error.message).toMatch(/resolves to (127\.0\.0\.1|::1), a loopback address/);
  });
});

describe('checkUrl accepts', () => {
  it.each([
    'http://93.184.215.14/',
    'https://93.184.215.14:8443/hook?x=1',
    'https://[2606:4700::1111]/',
    'http://1572394766/',
    'http://[::ffff:93.184.215.14]/',
    'https://[2002:5db8:d70e::1]/',
    'http://public.test/hook',
    'https://PUBLIC.test/a.png',
    'https://public6.test/',
    'https://dual.test/',
    'http://172.32.0.1/',
  ])('public %s', async (url) => {
    const checked = await strict.checkUrl(url, 'webhook.url');
    expect(checked).toBeInstanceOf(URL);
  });

  it('answers the URL normalised, numeric spellings included', async () => {
    expect((await strict.checkUrl('http://1572394766/x', 'webhook.url')).href).toBe('http://93.184.215.14/x');
  });

  it.each([
    ['http://127.0.0.1:8080/hook', 'address 127.0.0.1 is listed'],
    ['http://localhost:8080/hook', 'localhost resolves to the listed 127.0.0.1'],
    ['http://loopback.test/', 'loopback.test resolves to the listed 127.0.0.1'],
    ['http://[::ffff:127.0.0.1]/', 'the mapped form of a listed address'],
    ['http://[::1]/', '::1 is listed'],
    ['http://10.1.2.3/', '10.0.0.0/8 is listed'],
    ['http://private.test/', 'private.test resolves into 10.0.0.0/8'],
    ['http://[fd12::1]/', 'fc00::/7 is listed'],
    ['http://receiver.onprem.test/', 'the host name is listed (case-insensitively)'],
    ['http://public.test/', 'public addresses need no listing'],
  ])('%s when %s', async (url) => {
    expect(await permissive.checkUrl(url, 'webhook.url')).toBeInstanceOf(URL);
  });

  it('still refuses private addresses that allow_hosts does not cover', async () => {
    await expect(permissive.checkUrl('http://172.16.0.1/', 'webhook.url')).rejects.toMatchObject({
      code: 'unsafe-url',
    });
  });
});

describe('createOutboundPolicy', () => {
  it('refuses an allow_hosts entry that is neither a name nor an address', () => {
    expect(() =>
      createOutboundPolicy({ allow_hosts: ['10.0.0.0/33', 'ok.example', 'not a host'], dns_servers: [] }),
    ).toThrow(ConfigError);
    try {
      createOutboundPolicy({ allow_hosts: ['10.0.0.0/33', 'ok.example', 'not a host'], dns_servers: [] });
    } catch (error) {
      expect((error as ConfigError).problems).toEqual([
        "security.allow_hosts[0]: '10.0.0.0/33' is neither a host name nor an IP address or CIDR",
        "security.allow_hosts[2]: 'not a host' is neither a host name nor an IP address or CIDR",
      ]);
    }
  });

  it('refuses a malformed DNS server', () => {
    expect(() => createOutboundPolicy({ allow_hosts: [], dns_servers: ['not-an-ip'] })).toThrow(ConfigError);
  });
});
