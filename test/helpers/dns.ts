import { createSocket } from 'node:dgram';
import { isIP } from 'node:net';
import { parseIp } from '../../src/net/addresses.js';

/**
 * A tiny real DNS server over UDP on 127.0.0.1, for `security.dns_servers`. It answers A and
 * AAAA queries from `records`, which a test may change at any time (DNS rebinding); unknown
 * names get NXDOMAIN, and every answer has TTL 0 so that no resolver caches it.
 */
export interface TestDns {
  /** `127.0.0.1:<port>`, as `security.dns_servers` takes it. */
  server: string;
  /** Lower-case name → its addresses; IPv4 ones answer A queries, IPv6 ones AAAA. */
  records: Map<string, string[]>;
  close(): Promise<void>;
}

const A = 1;
const AAAA = 28;

export async function startTestDns(initial: Record<string, string[]> = {}): Promise<TestDns> {
  const records = new Map(
    Object.entries(initial).map(([name, addresses]) => [name.toLowerCase(), addresses]),
  );
  const socket = createSocket('udp4');
  socket.on('message', (query, peer) => {
    const reply = answer(query, records);
    if (reply) socket.send(reply, peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    server: `127.0.0.1:${socket.address().port}`,
    records,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function answer(query: Buffer, records: Map<string, string[]>): Buffer | undefined {
  // The question follows the 12-byte header: length-prefixed labels, a zero byte, type, class.
  const labels: string[] = [];
  let at = 12;
  while (at < query.length && query[at] !== 0) {
    const length = query[at] as number;
    labels.push(query.toString('latin1', at + 1, at + 1 + length));
    at += 1 + length;
  }
  if (at + 5 > query.length) return undefined;
  const type = query.readUInt16BE(at + 1);
  const known = records.get(labels.join('.').toLowerCase());
  const family = type === A ? 4 : type === AAAA ? 6 : -1;
  const addresses = (known ?? []).filter((address) => isIP(address) === family);

  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0); // the query's id
  // QR (a response) and AA (authoritative), RD copied from the query, rcode 3 (NXDOMAIN) if unknown.
  header.writeUInt16BE(0x8400 | (query.readUInt16BE(2) & 0x0100) | (known ? 0 : 3), 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(addresses.length, 6);
  return Buffer.concat([header, query.subarray(12, at + 5), ...addresses.map((a) => record(type, a))]);
}

function record(type: number, address: string): Buffer {
  const width = type === A ? 4 : 16;
  const value = parseIp(address)?.value ?? 0n;
  const data = Buffer.from(value.toString(16).padStart(width * 2, '0'), 'hex');
  const head = Buffer.alloc(12);
  head.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's, at offset 12
  head.writeUInt16BE(type, 2);
  head.writeUInt16BE(1, 4); // class IN
  head.writeUInt32BE(0, 6); // TTL 0
  head.writeUInt16BE(width, 10);
  return Buffer.concat([head, data]);
}
