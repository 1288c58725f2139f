import { describe, expect, it } from 'vitest';
import { parseRange } from '../../src/files/range.js';

describe('Range header', () => {
  const size = 1000;
  const partial = (start: number, end: number) => ({ kind: 'partial', range: { start, end } });

  it('reads the three forms of one byte range', () => {
    expect(parseRange('bytes=0-99', size)).toEqual(partial(0, 99));
    expect(parseRange('bytes=990-', size)).toEqual(partial(990, 999));
    expect(parseRange('bytes=-50', size)).toEqual(partial(950, 999));
    expect(parseRange(' Bytes = 5-5 ', size)).toEqual(partial(5, 5));
  });

  it('clips a range that runs past the end, and a suffix longer than the object', () => {
    expect(parseRange('bytes=900-5000', size)).toEqual(partial(900, 999));
    expect(parseRange('bytes=-5000', size)).toEqual(partial(0, 999));
  });

  it('calls a range that starts past the end unsatisfiable', () => {
    for (const header of ['bytes=1000-', 'bytes=1000000-', 'bytes=1000-1001', 'bytes=-0']) {
      expect(parseRange(header, size)).toEqual({ kind: 'unsatisfiable' });
    }
    expect(parseRange('bytes=0-', 0)).toEqual({ kind: 'unsatisfiable' });
    expect(parseRange('bytes=-5', 0)).toEqual({ kind: 'unsatisfiable' });
  });

  it('ignores what it cannot read, and several ranges: the whole object', () => {
    for (const header of [
      undefined,
      '',
      'bytes=',
      'bytes=-',
      'bytes=9-0',
      'bytes=a-b',
      'bytes=1.5-2',
      'items=0-9',
      'bytes=0-9,20-29',
      'bytes=0-9,',
    ]) {
      expect(parseRange(header, size)).toEqual({ kind: 'full' });
    }
  });
});
