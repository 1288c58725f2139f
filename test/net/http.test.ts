import dc from 'node:diagnostics_channel';
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { type Agent, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KilnError } from '../../src/errors.js';
import {
  createOutboundAgent,
  createSafeLookup,
  requestFollowingRedirects,
  UnsafeAddressError,
} from '../../src/net/http.js';
import { createOutboundPolicy, type OutboundPolicy } from '../../src/net/policy.js';
import { startTestDns, type TestDns } from '../helpers/dns.js';

// Only 127.0.0.1 is ever dialled: every unsafe address must be refused before the connect.
let dns: TestDns;
let policy: OutboundPolicy;
let agent: Agent;
let receiver: Server;
let base: string;
const hits: string[] = [];
const attempts: string[] = [];

/** Records every address a client socket of this process tries to connect to. */
const recordAttempts = (message: unknown) => {
  const { socket } = message as { socket: Socket };
  socket.on('connectionAttempt', (ip: string, port: number) => attempts.push(`${ip}:${port}`));
};

beforeAll(async () => {
  dc.subscribe('net.client.socket', recordAttempts);
  dns = await startTestDns();
  policy = createOutboundPolicy({ allow_hosts: ['127.0.0.1'], dns_servers: [dns.server] });
  agent = createOutboundAgent(policy, { connectTimeout: 1000 });
  receiver = createServer((req, res) => {
    const url = req.url ?? '/';
    hits.push(url);
    // One connection per request, so that every request dials (and is checked) afresh.
    res.setHeader('connection', 'close');
    const hops = /^\/hops\/(\d+)$/.exec(url)?.[1];
    const to = new URL(url, 'http://x').searchParams.get('location');
    if (url === '/moved') res.writeHead(302, { location: '/hook' }).end();
    else if (hops !== undefined) {
      res.writeHead(302, { location: hops === '1' ? '/image.png' : `/hops/${Number(hops) - 1}` }).end();
    } else if (to !== null) res.writeHead(307, { location: to }).end();
    else res.writeHead(200, { 'content-type': 'text/plain' }).end(url === '/image.png' ? 'PNG' : 'ok');
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const address = receiver.address();
  if (address === null || typeof address === 'string') throw new Error('receiver has no port');
  base = `receiver.test:${address.port}`;
});

beforeEach(() => {
  hits.length = 0;
  attempts.length = 0;
  dns.records.clear();
  dns.records.set('receiver.test', ['127.0.0.1']);
});

afterAll(async () => {
  dc.unsubscribe('net.client.socket', recordAttempts);
  await agent.close();
  await new Promise((resolve) => receiver.close(resolve));
  await dns.close();
});

async function refusedDial(url: string): Promise<UnsafeAddressError> {
  const error = await request(url, { dispatcher: agent }).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (error instanceof UnsafeAddressError) return error;
  throw new Error(`expected an UnsafeAddressError for ${url}, got ${String(error)}`);
}

const onlyLoopbackDialled = () => expect(attempts.every((a) => a.startsWith('127.0.0.1:'))).toBe(true);

describe('the outbound agent, at connection time', () => {
  it('reaches an allowed receiver by name, then refuses the name once DNS rebinds it to metadata', async () => {
    const url = `http://${base}/hook`;
    await policy.checkUrl(url, 'webhook.url');
    const ok = await request(url, { dispatcher: agent, method: 'POST', body: '{}' });
    expect(ok.statusCode).toBe(200);
    expect(await ok.body.text()).toBe('ok');
    expect(hits).toEqual(['/hook']);

    dns.records.set('receiver.test', ['169.254.169.254']);
    const error = await refusedDial(url);
    expect(error).toBeInstanceOf(KilnError);
    expect(error.code).toBe('unsafe-url');
    expect(error.message).toBe(
      'refused to connect to receiver.test: it resolves to 169.254.169.254, a cloud metadata address',
    );
    expect(error.refusal?.addressClass).toBe('metadata');
    expect(hits).toEqual(['/hook']);
    expect(attempts).toHaveLength(1);
    onlyLoopbackDialled();
  });

  it('refuses a name rebound to a private address allow_hosts does not list', async () => {
    dns.records.set('receiver.test', ['10.0.0.1']);
    const error = await refusedDial(`http://${base}/hook`);
    expect(error.message).toContain('10.0.0.1, a private address not listed in security.allow_hosts');
    expect(hits).toEqual([]);
    expect(attempts).toEqual([]);
  });

  it('refuses a loopback address other than the one allow_hosts lists', async () => {
    dns.records.set('receiver.test', ['127.0.0.2']);
    const error = await refusedDial(`http://${base}/hook`);
    expect(error.refusal).toMatchObject({ address: '127.0.0.2', addressClass: 'loopback' });
    expect(attempts).toEqual([]);
  });

  it('refuses when any of the addresses is unsafe, not only the first', async () => {
    dns.records.set('receiver.test', ['127.0.0.1', '169.254.169.254']);
    await refusedDial(`http://${base}/hook`);
    dns.records.set('receiver.test', ['127.0.0.1', 'fd00:ec2::254']);
    await refusedDial(`http://${base}/hook`);
    expect(hits).toEqual([]);
    expect(attempts).toEqual([]);
  });

  it('checks https connections the same way (the TLS connector uses the lookup too)', async () => {
    dns.records.set('receiver.test', ['169.254.169.254']);
    const error = await refusedDial(`https://${base}/hook`);
    expect(error.refusal?.address).toBe('169.254.169.254');
    expect(attempts).toEqual([]);
  });

  it.each([
    'http://169.254.169.254/latest/meta-data',
    'http://[::ffff:a9fe:a9fe]/',
    'http://[fd00:ec2::254]/',
    'http://10.0.0.1:1/',
    'https://0.0.0.0/',
    'http://127.0.0.2:1/',
  ])('refuses the IP literal %s, which needs no DNS', async (url) => {
    await refusedDial(url);
    expect(attempts).toEqual([]);
  });

  it('refuses a metadata host name before asking DNS', async () => {
    const error = await refusedDial('http://metadata.google.internal/computeMetadata/v1/');
    expect(error.message).toContain('a cloud metadata service');
    expect(attempts).toEqual([]);
  });

  it('reports a name that does not resolve as a network error, not as unsafe', async () => {
    const error = await request(`http://nowhere.test:1/`, { dispatcher: agent }).catch((e: unknown) => e);
    expect(error).not.toBeInstanceOf(UnsafeAddressError);
    expect((error as NodeJS.ErrnoException).code).toBe('ENOTFOUND');
  });

  it('reaches an allowed IP literal', async () => {
    const response = await request(`http://${base.replace('receiver.test', '127.0.0.1')}/hook`, {
      dispatcher: agent,
    });
    expect(response.statusCode).toBe(200);
    await response.body.dump();
  });

  it('does not follow redirects: the caller gets the 302', async () => {
    const response = await request(`http://${base}/moved`, { dispatcher: agent });
    expect(response.statusCode).toBe(302);
    expect(response.headers.location).toBe('/hook');
    await response.body.dump();
    expect(hits).toEqual(['/moved']);
  });
});

describe('the lookup on its own', () => {
  const lookup = createSafeLookup(createOutboundPolicy({ allow_hosts: ['127.0.0.1'], dns_servers: [] }));
  const call = (host: string, all: boolean) =>
    new Promise<{ error: Error | null; address: unknown; family: unknown }>((resolve) =>
      lookup(host, { all, family: 4 }, (error, address, family) => resolve({ error, address, family })),
    );

  it('answers one address or all of them, as net asks', async () => {
    dns.records.set('receiver.test', ['127.0.0.1']);
    const policyWithDns = createOutboundPolicy({ allow_hosts: ['127.0.0.1'], dns_servers: [dns.server] });
    const viaDns = createSafeLookup(policyWithDns);
    const one = await new Promise((resolve) =>
      viaDns('receiver.test', { family: 0 }, (error, address, family) => resolve({ error, address, family })),
    );
    expect(one).toEqual({ error: null, address: '127.0.0.1', family: 4 });
    const all = await new Promise((resolve) =>
      viaDns('receiver.test', { all: true }, (error, addresses) => resolve({ error, addresses })),
    );
    expect(all).toEqual({ error: null, addresses: [{ address: '127.0.0.1', family: 4 }] });
  });

  it('refuses through the system resolver too', async () => {
    expect((await call('metadata.google.internal', false)).error).toBeInstanceOf(UnsafeAddressError);
    expect((await call('localhost', true)).error).toBeNull();
  });
});

describe('requestFollowingRedirects (image fetches)', () => {
  const follow = (url: string) =>
    requestFollowingRedirects(agent, policy, url, { field: 'start_image', schemes: ['http:', 'https:'] });

  const refusal = async (url: string) => {
    const error = await follow(url).then(
      () => undefined,
      (e: unknown) => e,
    );
    if (error instanceof KilnError) return error;
    throw new Error(`expected a KilnError for ${url}, got ${String(error)}`);
  };

  it('follows up to 3 redirects', async () => {
    const response = await follow(`http://${base}/hops/3`);
    expect(response.statusCode).toBe(200);
    expect(await response.body.text()).toBe('PNG');
    expect(hits).toEqual(['/hops/3', '/hops/2', '/hops/1', '/image.png']);
  });

  it('refuses a fourth redirect without following it', async () => {
    const error = await refusal(`http://${base}/hops/4`);
    expect(error.details?.[0]).toMatchObject({ field: 'start_image', rule: 'max-redirects', limit: 3 });
    expect(hits).toEqual(['/hops/4', '/hops/3', '/hops/2', '/hops/1']);
  });

  it('refuses a redirect to a metadata address before connecting to it', async () => {
    const error = await refusal(`http://${base}/to?location=http://169.254.169.254/latest/meta-data`);
    expect(error.code).toBe('unsafe-url');
    expect(error.details?.[0]).toMatchObject({ field: 'start_image', rule: 'unsafe-url' });
    expect(error.message).toBe('start_image points at 169.254.169.254, a cloud metadata address');
    expect(attempts).toHaveLength(1);
    onlyLoopbackDialled();
  });

  it('refuses a redirect to a name resolving to a private address, and to another scheme', async () => {
    dns.records.set('intranet.test', ['192.168.1.10']);
    const intranet = await refusal(`http://${base}/to?location=http://intranet.test/admin`);
    expect(intranet.message).toContain('resolves to 192.168.1.10, a private address');
    const ftp = await refusal(`http://${base}/to?location=ftp://${base}/a.png`);
    expect(ftp.details?.[0]?.rule).toBe('scheme');
    onlyLoopbackDialled();
  });

  it('refuses an unsafe first URL without any request, and holds image inputs to https', async () => {
    await refusal('http://[::ffff:169.254.169.254]/a.png');
    const plain = await requestFollowingRedirects(agent, policy, `http://${base}/image.png`, {
      field: 'end_image',
      schemes: ['https:'],
    }).catch((e: unknown) => e);
    expect(plain).toMatchObject({ code: 'unsafe-url', details: [{ field: 'end_image', rule: 'scheme' }] });
    expect(hits).toEqual([]);
    expect(attempts).toEqual([]);
  });
});
