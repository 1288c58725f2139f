import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SseDecoder } from '../../src/engines/openai/sse.js';

/**
 * The OpenAI-compatible adapter reads engines' text/event-stream bodies through SseDecoder as the
 * bytes come off the socket: whatever the reads' boundaries, the payloads must be the engine's, whole.
 */

/** Every payload the decoder emits for `reads`, fed one after the other into one decoder. */
function decode(reads: readonly Buffer[]): string[] {
  const decoder = new SseDecoder();
  const out: string[] = [];
  for (const read of reads) decoder.push(read, (data) => out.push(data));
  return out;
}

/** `bytes` cut at the given offsets (sorted, deduplicated, within the buffer). */
function cut(bytes: Buffer, offsets: readonly number[]): Buffer[] {
  const points = [...new Set(offsets)].filter((o) => o > 0 && o < bytes.length).sort((a, b) => a - b);
  const reads: Buffer[] = [];
  let from = 0;
  for (const point of points) {
    reads.push(bytes.subarray(from, point));
    from = point;
  }
  reads.push(bytes.subarray(from));
  return reads;
}

const byteByByte = (bytes: Buffer) => Array.from(bytes, (b) => Buffer.from([b]));

/** A stream as llama.cpp or vLLM write it: one `data:` line per event, then `[DONE]`. */
const CHUNKS = [
  '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
  '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Grüße 🔥 "}}]}',
  '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"日本語のテキスト"}}]}',
  '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"a \\"quote\\" and a \\\\ backslash"}}]}',
  '{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
  '[DONE]',
];
const STREAM = Buffer.from(CHUNKS.map((c) => `data: ${c}\n\n`).join(''), 'utf8');

describe('SseDecoder', () => {
  it('answers each event’s data in order when the whole body arrives in one read', () => {
    expect(decode([STREAM])).toEqual(CHUNKS);
  });

  it('answers the same payloads when the body arrives one byte at a time', () => {
    const out = decode(byteByByte(STREAM));
    expect(out).toEqual(CHUNKS);
    // Multi-byte characters split over reads stay whole: no U+FFFD anywhere.
    expect(out.join('')).not.toContain('\uFFFD');
  });

  it('keeps a 4-byte emoji and a 3-byte CJK character whole when a read ends inside them', () => {
    const text = 'data: {"content":"🔥日"}\n\n';
    const bytes = Buffer.from(text, 'utf8');
    const emoji = bytes.indexOf(Buffer.from('🔥', 'utf8'));
    const cjk = bytes.indexOf(Buffer.from('日', 'utf8'));
    expect(emoji).toBeGreaterThan(0);
    expect(cjk).toBe(emoji + 4);
    // Every cut inside the emoji (after byte 1, 2 or 3) and inside the CJK character (after 1 or 2).
    for (const inside of [emoji + 1, emoji + 2, emoji + 3, cjk + 1, cjk + 2]) {
      expect(decode(cut(bytes, [inside])), `cut at ${inside}`).toEqual(['{"content":"🔥日"}']);
    }
    // Both at once, in three reads.
    expect(decode(cut(bytes, [emoji + 2, cjk + 1]))).toEqual(['{"content":"🔥日"}']);
  });

  it('answers the same payloads whatever the reads’ boundaries (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: STREAM.length - 1 }), { maxLength: 40 }), (offsets) => {
        expect(decode(cut(STREAM, offsets))).toEqual(CHUNKS);
      }),
      { numRuns: 300 },
    );
  });

  it('reads CRLF line ends, also when a read ends between CR and LF', () => {
    const crlf = Buffer.from(CHUNKS.map((c) => `data: ${c}\r\n\r\n`).join(''), 'utf8');
    expect(decode([crlf])).toEqual(CHUNKS);
    expect(decode(byteByByte(crlf))).toEqual(CHUNKS);
    const firstCr = crlf.indexOf('\r');
    expect(decode(cut(crlf, [firstCr + 1]))).toEqual(CHUNKS);
    // No stray CR survives at the end of a payload.
    for (const data of decode(byteByByte(crlf))) expect(data.endsWith('\r')).toBe(false);
  });

  it('joins the data lines of one event with a newline', () => {
    const body = Buffer.from('data: first line\ndata: second line\ndata:third, no space\n\ndata: next\n\n');
    const expected = ['first line\nsecond line\nthird, no space', 'next'];
    expect(decode([body])).toEqual(expected);
    expect(decode(byteByByte(body))).toEqual(expected);
  });

  it('strips only one space after the colon, and reads `data:` with none', () => {
    expect(decode([Buffer.from('data:{"a":1}\n\ndata:   indented\n\n')])).toEqual(['{"a":1}', '  indented']);
  });

  it('ignores event:, id:, retry: and comment lines, and events that carry no data', () => {
    const body = Buffer.from(
      [
        ': keep-alive comment',
        '',
        'event: message',
        'id: 41',
        'data: {"n":1}',
        '',
        'event: ping',
        '',
        ':another comment',
        'retry: 1000',
        'data: {"n":2}',
        'id: 42',
        '',
        'database: not a data field',
        'data: [DONE]',
        '',
        '',
      ].join('\r\n'),
    );
    const expected = ['{"n":1}', '{"n":2}', '[DONE]'];
    expect(decode([body])).toEqual(expected);
    expect(decode(byteByByte(body))).toEqual(expected);
  });

  it('answers [DONE] as the data it is', () => {
    expect(decode([Buffer.from('data: [DONE]\n\n')])).toEqual(['[DONE]']);
  });

  it('holds an event back until its blank line arrives', () => {
    const decoder = new SseDecoder();
    const out: string[] = [];
    const push = (text: string) => decoder.push(Buffer.from(text, 'utf8'), (data) => out.push(data));

    push('data: {"n":1}\n\ndata: {"n":2}');
    expect(out).toEqual(['{"n":1}']);
    push('\n');
    // The line is complete, the event is not.
    expect(out).toEqual(['{"n":1}']);
    push('data: {"more":true}\n');
    expect(out).toEqual(['{"n":1}']);
    push('\n');
    expect(out).toEqual(['{"n":1}', '{"n":2}\n{"more":true}']);
    // A body that ends without the blank line never emits its last event.
    push('data: cut off');
    push('\n');
    expect(out).toHaveLength(2);
  });

  it('is not disturbed when the caller reuses its read buffer', () => {
    const decoder = new SseDecoder();
    const out: string[] = [];
    const buffer = Buffer.alloc(8);
    const bytes = STREAM;
    for (let at = 0; at < bytes.length; at += buffer.length) {
      const n = bytes.copy(buffer, 0, at, at + buffer.length);
      decoder.push(buffer.subarray(0, n), (data) => out.push(data));
      buffer.fill(0x78); // overwrite, as a socket reusing its buffer would
    }
    expect(out).toEqual(CHUNKS);
  });
});
