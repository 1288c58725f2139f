import type { ByteRange } from './storage.js';

/** What to answer a request's `Range` header with, for an object of `size` bytes. */
export type RangeAnswer =
  | { kind: 'full' }
  | { kind: 'partial'; range: ByteRange }
  | { kind: 'unsatisfiable' };

const SPEC = /^(\d*)-(\d*)$/;

/**
 * Reads `bytes=a-b`, `bytes=a-` and `bytes=-n`. A header that does not parse is ignored (the whole
 * object, as RFC 9110 allows); so is a request for several ranges, which Kiln answers with the whole
 * object rather than multipart/byteranges.
 */
export function parseRange(header: string | undefined, size: number): RangeAnswer {
  if (header === undefined) return { kind: 'full' };
  const match = /^\s*bytes\s*=\s*(.+?)\s*$/i.exec(header);
  if (!match) return { kind: 'full' };
  const specs = (match[1] as string).split(',').map((s) => s.trim());
  if (specs.length !== 1) return { kind: 'full' };
  const spec = SPEC.exec(specs[0] as string);
  if (!spec) return { kind: 'full' };
  const [, first, last] = spec as unknown as [string, string, string];
  if (first === '' && last === '') return { kind: 'full' };

  if (first === '') {
    // The last n bytes.
    const length = Number(last);
    if (length === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'partial', range: { start: Math.max(0, size - length), end: size - 1 } };
  }
  const start = Number(first);
  if (last !== '' && Number(last) < start) return { kind: 'full' };
  if (start >= size) return { kind: 'unsatisfiable' };
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  return { kind: 'partial', range: { start, end } };
}
