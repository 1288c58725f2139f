import type { TSchema } from '@sinclair/typebox';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { type ErrorDetail, validationError } from '../errors.js';

const common = {
  allErrors: true,
  verbose: true,
  strict: false,
  useDefaults: true,
  removeAdditional: false,
} as const;
/** Bodies are JSON: a string is never quietly turned into a number. */
const bodyAjv = new Ajv({ ...common, coerceTypes: false });
/** Query strings and path parameters are text by nature: `?limit=5` means 5. */
const textAjv = new Ajv({ ...common, coerceTypes: 'array' });

/**
 * A number in a query string or path written as a person writes one: Ajv's coercion alone would take
 * anything `Number()` reads (`1e1`, `0x10`, ` 5`), which no client means and OpenAI's API refuses.
 */
const WRITTEN = { integer: /^-?[0-9]+$/, number: /^-?[0-9]+(\.[0-9]+)?$/ } as const;

export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  if (httpPart === 'body') return bodyAjv.compile(schema);
  const validate = textAjv.compile(schema);
  const numbers = Object.entries((schema as SchemaHints).properties ?? {}).flatMap(([name, property]) => {
    const type = (property as SchemaHints).type;
    return type === 'integer' || type === 'number' ? [{ name, type, pattern: WRITTEN[type] }] : [];
  });
  if (numbers.length === 0) return validate;
  const strictly = (data: Record<string, unknown> | undefined) => {
    const errors: ErrorObject[] = [];
    for (const { name, type, pattern } of numbers) {
      const value = data?.[name];
      if (typeof value === 'string' && !pattern.test(value))
        errors.push({
          keyword: 'type',
          instancePath: `/${name}`,
          schemaPath: `#/properties/${name}/type`,
          params: { type },
          data: value,
        });
    }
    // The schema's other problems too (an unknown parameter beside a bad number), each field once.
    const valid = validate(data) && errors.length === 0;
    const flagged = new Set(errors.map((e) => e.instancePath));
    const rest = (validate.errors ?? []).filter((e) => !flagged.has(e.instancePath));
    strictly.errors = errors.length > 0 ? [...rest, ...errors] : validate.errors;
    return valid;
  };
  strictly.errors = null as ErrorObject[] | null | undefined;
  return strictly;
};

interface SchemaHints {
  description?: string;
  pattern?: string;
  type?: string;
  properties?: Record<string, unknown>;
  anyOf?: Array<{ const?: unknown }>;
  enum?: unknown[];
}

/** JSON pointer `/messages/0/role` → `messages[0].role`; the part name stands in for the root. */
function fieldName(pointer: string, root: string): string {
  if (!pointer) return root;
  return pointer
    .slice(1)
    .split('/')
    .map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce((out, part) => (/^\d+$/.test(part) ? `${out}[${part}]` : out ? `${out}.${part}` : part), '');
}

/** What the caller sent, short enough for an error message. */
function shown(value: unknown): unknown {
  if (typeof value === 'string') return value.length > 80 ? `${value.slice(0, 80)}…` : value;
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return value;
  return Array.isArray(value) ? 'array' : typeof value;
}

const withArticle = (type: string) =>
  type
    .split(',')
    .map((t) => (/^[aeiou]/.test(t) ? `an ${t}` : t === 'null' ? 'null' : `a ${t}`))
    .join(' or ');

const snake = (name: string) =>
  name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/-/g, '_')
    .toLowerCase();

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let previous = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const current = row[j] as number;
      row[j] = Math.min(current + 1, (row[j - 1] as number) + 1, previous + (a[i - 1] === b[j - 1] ? 0 : 1));
      previous = current;
    }
  }
  return row[b.length] as number;
}

/** The known field an unknown one was probably meant to be: its snake_case twin, or a near spelling. */
export function lookAlike(unknown: string, known: string[]): string | undefined {
  const exact = known.find((k) => k === snake(unknown));
  if (exact) return exact;
  const near = known
    .map((k) => ({ k, d: editDistance(unknown.toLowerCase(), k) }))
    .filter(({ d }) => d <= 2)
    .sort((a, b) => a.d - b.d)[0];
  return near?.k;
}

function describe(error: ErrorObject, root: string): ErrorDetail {
  const at = fieldName(error.instancePath, root);
  const schema = (error.parentSchema ?? {}) as SchemaHints;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required': {
      const missing = String(params.missingProperty);
      const field = at === root ? missing : `${at}.${missing}`;
      return { field, rule: 'required', message: `${field} is required` };
    }
    case 'additionalProperties': {
      const extra = String(params.additionalProperty);
      const field = at === root ? extra : `${at}.${extra}`;
      const known = Object.keys(schema.properties ?? {});
      const hint = lookAlike(extra, known);
      return {
        field,
        rule: 'unknown-field',
        message: `unknown field '${field}'${hint ? ` (did you mean ${hint}?)` : ''}`,
        allowed: known,
      };
    }
    case 'type':
      return {
        field: at,
        rule: 'type',
        message: `${at} must be ${withArticle(String(params.type))}`,
        received: shown(error.data),
      };
    case 'pattern':
      return {
        field: at,
        rule: 'pattern',
        message: `${at} must be ${schema.description ?? `text matching ${schema.pattern}`}`,
        received: shown(error.data),
      };
    case 'minLength':
    case 'maxLength': {
      const limit = Number(params.limit);
      const length = typeof error.data === 'string' ? error.data.length : undefined;
      return {
        field: at,
        rule: error.keyword === 'minLength' ? 'min_length' : 'max_length',
        message: `${at} must be ${error.keyword === 'minLength' ? 'at least' : 'at most'} ${limit} characters${length === undefined ? '' : ` (got ${length})`}`,
        limit,
        received: length,
      };
    }
    case 'minItems':
    case 'maxItems': {
      const limit = Number(params.limit);
      return {
        field: at,
        rule: error.keyword === 'minItems' ? 'min_items' : 'max_items',
        message: `${at} must have ${error.keyword === 'minItems' ? 'at least' : 'at most'} ${limit} item${limit === 1 ? '' : 's'}`,
        limit,
        received: Array.isArray(error.data) ? error.data.length : undefined,
      };
    }
    case 'minimum':
    case 'maximum':
      return {
        field: at,
        rule: error.keyword,
        message: `${at} must be ${error.keyword === 'minimum' ? 'at least' : 'at most'} ${String(params.limit)}`,
        limit: Number(params.limit),
        received: shown(error.data),
      };
    case 'anyOf':
    case 'enum':
    case 'const': {
      const allowed = schema.anyOf?.map((s) => s.const) ?? schema.enum ?? [params.allowedValue];
      return {
        field: at,
        rule: 'enum',
        message: `${at} must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}`,
        received: shown(error.data),
        allowed,
      };
    }
    default:
      return {
        field: at,
        rule: error.keyword,
        message: `${at} ${error.message ?? 'is invalid'}`,
        received: shown(error.data),
      };
  }
}

/** Ajv's errors as Kiln's `details`: one entry per problem, the noise of union branches dropped. */
export function toDetails(errors: ErrorObject[], root = 'body'): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  const unions = new Map(errors.filter((e) => e.keyword === 'anyOf').map((e) => [e.instancePath, e]));
  for (const [at, union] of unions) {
    const branches = errors.filter((e) => e.instancePath === at && e !== union);
    const enumLike = ((union.parentSchema as SchemaHints | undefined)?.anyOf ?? []).some((b) => 'const' in b);
    const ruled = branches.filter((e) => e.keyword !== 'type');
    // Errors inside the value: it has a branch's type (an object, an array) and breaks a rule within
    // it. Those errors say what is wrong; "must be null" of the other branch would not.
    const within = errors.some((e) => e.instancePath.startsWith(`${at}/`));
    if (enumLike) details.push(describe(union, root));
    else if (within && ruled.length === 0) continue;
    // A nullable or multi-typed field: the rule the value broke, else the types it may have.
    else if (ruled.length > 0) details.push(...ruled.map((e) => describe(e, root)));
    else {
      const types = branches.map((e) => String((e.params as { type: string }).type)).join(',');
      details.push({
        ...describe({ ...union, keyword: 'type', params: { type: types } }, root),
        rule: 'type',
      });
    }
  }
  for (const error of errors) {
    if (error.keyword !== 'anyOf' && !unions.has(error.instancePath)) details.push(describe(error, root));
  }
  const seen = new Set<string>();
  return details.filter((d) => {
    const key = `${d.field}|${d.rule}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** Enough to say what is wrong; a body of a million NULs does not need a million details. */
const MAX_TEXT_DETAILS = 20;
/**
 * How deep a JSON body may nest. Far beyond any real request (a tool's parameter schema nested ten
 * levels uses about thirty), and far below where serialising it again would exhaust the stack.
 */
export const MAX_JSON_DEPTH = 128;
/** With the `u` flag a surrogate pair is one code point, so this matches only a lone surrogate. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Why a string cannot be stored alike on both stores, if it cannot. */
function unstorable(text: string): { rule: 'nul' | 'unicode'; problem: string } | undefined {
  if (text.includes('\0')) return { rule: 'nul', problem: 'must not contain the NUL character (U+0000)' };
  if (LONE_SURROGATE.test(text))
    return { rule: 'unicode', problem: 'must be valid Unicode (it holds a lone surrogate)' };
  return undefined;
}

/**
 * Where `value` holds text the two stores would treat differently, as details naming each field:
 * a NUL character (PostgreSQL refuses it, SQLite stores it) or a lone UTF-16 surrogate (PostgreSQL
 * stores U+FFFD, SQLite bytes that are not UTF-8). Kiln refuses both, so both stores give one answer.
 * Also a number too large for a double (JSON's `1e400`), which would be stored as null, and a value
 * nested deeper than MAX_JSON_DEPTH, which could not be serialised again to be stored.
 * Walks breadth-first without recursion, so a deeply nested JSON body cannot exhaust the stack.
 */
export function unstorableTextDetails(value: unknown, root: string): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  const queue: Array<{ value: unknown; at: string; depth: number }> = [{ value, at: '', depth: 0 }];
  for (let i = 0; i < queue.length && details.length < MAX_TEXT_DETAILS; i++) {
    const { value: item, at, depth } = queue[i] as (typeof queue)[number];
    const field = at || root;
    if (depth > MAX_JSON_DEPTH && item !== null && typeof item === 'object') {
      details.push({
        field,
        rule: 'depth',
        message: `${field} is nested more than ${MAX_JSON_DEPTH} levels deep`,
        limit: MAX_JSON_DEPTH,
      });
      break;
    }
    if (typeof item === 'string') {
      const bad = unstorable(item);
      if (bad) details.push({ field, rule: bad.rule, message: `${field} ${bad.problem}` });
    } else if (typeof item === 'number' && !Number.isFinite(item)) {
      // JSON's 1e400 parses to Infinity, which JSON cannot hold: it would be stored as null.
      details.push({ field, rule: 'finite', message: `${field} is too large a number` });
    } else if (Array.isArray(item)) {
      for (const [n, element] of item.entries())
        queue.push({ value: element, at: `${at}[${n}]`, depth: depth + 1 });
    } else if (item !== null && typeof item === 'object') {
      for (const [key, property] of Object.entries(item)) {
        const bad = unstorable(key);
        if (bad)
          details.push({ field, rule: bad.rule, message: `the field names of ${field} ${bad.problem}` });
        else queue.push({ value: property, at: at ? `${at}.${key}` : key, depth: depth + 1 });
      }
    }
  }
  return details;
}

/**
 * The path's parameters by the names the API gives them: a wildcard is a context's `id_or_name`
 * (`/api/v1/contexts/*`, whose names may hold `/`) or a model's `id` (`/v1/models/*`), not `*`.
 */
function namedParams(params: unknown, url: string | undefined): unknown {
  if (!params || typeof params !== 'object' || !('*' in params)) return params;
  const { '*': ref, ...rest } = params as Record<string, unknown>;
  return { ...rest, [url === '/v1/models/*' ? 'id' : 'id_or_name']: ref };
}

/**
 * An endpoint that takes no body (a cancel, `/admin/reload`, a DELETE) refuses one with fields: they
 * would be silently ignored, as unknown fields are nowhere else. No body, or `{}`, is no body.
 */
function bodyWhereNoneDetails(request: FastifyRequest): ErrorDetail[] {
  const { body } = request;
  if (body === undefined || request.routeOptions.schema?.body) return [];
  const object = body !== null && typeof body === 'object' && !Array.isArray(body);
  const fields = object ? Object.keys(body) : [];
  if (object && fields.length === 0) return [];
  const message = `${request.method} ${request.routeOptions.url} takes no body`;
  return fields.length > 0
    ? fields.slice(0, MAX_TEXT_DETAILS).map((field) => ({
        field,
        rule: 'unknown-field',
        message: `unknown field '${field}': ${message}`,
      }))
    : [{ field: 'body', rule: 'type', message }];
}

/**
 * The preValidation hook that answers 400 `validation-failed` to unstorable text in the query string
 * or the JSON body, and to a body where the endpoint takes none.
 */
export function refuseUnstorableText() {
  return async function refuseUnstorable(request: FastifyRequest): Promise<void> {
    const details = [
      // A reference in the path too: PostgreSQL refuses a NUL in a statement's text parameter.
      ...unstorableTextDetails(namedParams(request.params, request.routeOptions.url), 'path'),
      ...unstorableTextDetails(request.query, 'querystring'),
      ...unstorableTextDetails(request.body, 'body'),
    ];
    if (details.length > 0) throw validationError(details.slice(0, MAX_TEXT_DETAILS));
    // In the same hook, not one more a request: a body where the endpoint takes none.
    const unwanted = bodyWhereNoneDetails(request);
    if (unwanted.length > 0) throw validationError(unwanted);
  };
}

const compiled = new WeakMap<TSchema, ValidateFunction>();

/** Validates a value outside Fastify (MCP tool arguments) with the same rules and the same details. */
export function assertValid<T>(schema: TSchema, value: unknown, root = 'arguments'): T {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = bodyAjv.compile(schema);
    compiled.set(schema, validate);
  }
  if (!validate(value)) throw validationError(toDetails(validate.errors ?? [], root));
  const unstorableText = unstorableTextDetails(value, root);
  if (unstorableText.length > 0) throw validationError(unstorableText);
  return value as T;
}
