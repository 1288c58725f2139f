import { randomBytes, randomFillSync } from 'node:crypto';

let lastMs = 0;
let sequence = 0;

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, a 12-bit counter, then randomness. The counter
 * (RFC 9562 method 1) keeps ids made in one process within one millisecond in creation order, which
 * the job queue relies on for first-in, first-out.
 */
export function uuidv7(now = Date.now()): string {
  if (now > lastMs) {
    lastMs = now;
    sequence = random(2).readUInt16BE() & 0x7ff; // start low in the 12 bits, leaving room to count
  } else if (++sequence > 0xfff) {
    lastMs++; // the counter ran out: borrow the next millisecond rather than lose the order
    sequence = 0;
  }
  const bytes = Buffer.allocUnsafe(16);
  random(8).copy(bytes, 8);
  let ms = lastMs;
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Random bytes for ids, drawn from the system's generator a few KB at a time rather than per id. */
const entropy = Buffer.alloc(4096);
let entropyAt = entropy.length;
function random(length: number): Buffer {
  if (entropyAt + length > entropy.length) {
    randomFillSync(entropy);
    entropyAt = 0;
  }
  entropyAt += length;
  return entropy.subarray(entropyAt - length, entropyAt);
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` characters of base62 drawn without modulo bias. */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += BASE62[byte % 62];
    }
  }
  return out;
}

/** Resource ids: a type prefix and a time-ordered body, e.g. `ctx_0193c1a2…`. */
export function newId(prefix: 'org' | 'key' | 'ctx'): string {
  return `${prefix}_${uuidv7().replaceAll('-', '')}`;
}
