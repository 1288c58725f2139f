import { describe, expect, it } from 'vitest';
import { newId, randomBase62, uuidv7 } from '../../src/ids.js';

describe('ids', () => {
  it('UUIDv7s are well formed and sort in creation order, even within one millisecond', () => {
    const ids = Array.from({ length: 5000 }, () => uuidv7());
    for (const id of ids)
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('carries the creation time in its first 48 bits', () => {
    const at = Date.UTC(2030, 0, 1);
    expect(Number.parseInt(uuidv7(at).replace(/-/g, '').slice(0, 12), 16)).toBeGreaterThanOrEqual(at);
  });

  it('prefixed ids and base62 tokens have the documented shapes', () => {
    expect(newId('ctx')).toMatch(/^ctx_[0-9a-f]{32}$/);
    expect(randomBase62(32)).toMatch(/^[0-9A-Za-z]{32}$/);
  });
});
