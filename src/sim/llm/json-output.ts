import { isObject } from './protocol.js';
import { generateTokens } from './text.js';

/**
 * Output held to a `response_format`, as engines' constrained decoding holds it (llama.cpp turns
 * the schema into a grammar): JSON that fits the schema, ending `stop` — unless `max_tokens` cuts
 * it first, when it ends `length`, unfinished, as a real engine's does (recordings/llamacpp,
 * chat-json-schema.json). The values are made up, the same for the same request.
 */

/** What the request asked for: `json_object` (no schema) or `json_schema`'s schema. */
export interface JsonFormat {
  schema: Record<string, unknown> | undefined;
}

/** Schemas nest no deeper than this in what is made; deeper, a value is null. */
const MAX_DEPTH = 8;

/** A deterministic whole number from a key, in [min, max]. */
function numberOf(key: string, min: number, max: number): number {
  let hash = 0;
  for (let i = 0; i < key.length; i++) hash = (hash * 31 + key.charCodeAt(i)) >>> 0;
  return min + (hash % Math.max(1, max - min + 1));
}

/** A value that fits `schema`, made up from `key`. */
function fitting(schema: unknown, key: string, depth: number): unknown {
  if (!isObject(schema) || depth > MAX_DEPTH) return null;
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  for (const union of ['anyOf', 'oneOf', 'allOf'] as const) {
    const branches = schema[union];
    if (Array.isArray(branches) && branches.length > 0) return fitting(branches[0], key, depth + 1);
  }
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const properties = isObject(schema.properties) ? schema.properties : {};
      const value: Record<string, unknown> = {};
      for (const [name, property] of Object.entries(properties))
        value[name] = fitting(property, `${key}.${name}`, depth + 1);
      return value;
    }
    case 'array': {
      const count = Math.max(1, typeof schema.minItems === 'number' ? schema.minItems : 1);
      return Array.from({ length: Math.min(count, 8) }, (_, i) =>
        fitting(schema.items, `${key}[${i}]`, depth + 1),
      );
    }
    case 'string': {
      const words = generateTokens(key, 3).join('');
      const max = typeof schema.maxLength === 'number' ? schema.maxLength : words.length;
      const min = typeof schema.minLength === 'number' ? schema.minLength : 0;
      return words.slice(0, max).padEnd(min, '.');
    }
    case 'integer':
    case 'number': {
      const min = typeof schema.minimum === 'number' ? Math.ceil(schema.minimum) : 0;
      const max = typeof schema.maximum === 'number' ? Math.floor(schema.maximum) : min + 99;
      return numberOf(key, min, max);
    }
    case 'boolean':
      return numberOf(key, 0, 1) === 1;
    case 'null':
      return null;
    default:
      return isObject(schema.properties) ? fitting({ ...schema, type: 'object' }, key, depth) : null;
  }
}

/** The JSON text a request with `format` gets, cut into tokens of a few characters each. */
export function jsonTokens(format: JsonFormat, key: string): string[] {
  const value = format.schema ? fitting(format.schema, key, 0) : { answer: generateTokens(key, 4).join('') };
  const text = JSON.stringify(value);
  const tokens: string[] = [];
  for (let at = 0; at < text.length; at += 4) tokens.push(text.slice(at, at + 4));
  return tokens;
}
