/**
 * The structure of a JSON value, values left out: objects by their keys, arrays by the set of
 * their elements' structures (so lengths, ids, times, sizes and text do not count).
 */
export function shape(value: unknown): unknown {
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    const kinds = new Map(value.map((item) => [JSON.stringify(shape(item)), shape(item)]));
    return { '[]': [...kinds.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, s]) => s) };
  }
  if (typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value as object)
        .sort()
        .map((key) => [key, shape((value as Record<string, unknown>)[key])]),
    );
  }
  return typeof value;
}
