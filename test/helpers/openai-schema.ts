/**
 * Checks Kiln's Responses API answers against OpenAI's published schemas
 * (test/fixtures/openai/responses-schemas.json, cut from OpenAI's OpenAPI document by extract.ts).
 *
 * The fixture is OpenAPI 3.1, which is JSON Schema 2020-12 plus a few words of its own. At load:
 * references move from `#/components/schemas/X` to `#/$defs/X`; 2019-09's `$recursiveRef` becomes
 * a plain `$ref` to its component; `discriminator`, `example` and `x-*` are registered as
 * annotations; the formats OpenAI uses are defined. Ajv stays strict about unknown keywords and
 * formats, so a refresh that brings a new one fails here instead of being silently ignored.
 *
 * For readable errors, a union whose members each require one `type` is rewritten from
 * `oneOf`/`anyOf` into one `if type is T then the members of type T` per type, plus "type is one of
 * them". That accepts exactly the same values, but a failing item reports only its own type's errors.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';

type JsonObject = { [key: string]: unknown };

const FIXTURE = new URL('../fixtures/openai/responses-schemas.json', import.meta.url);
const DOCUMENT_ID = 'https://kiln.invalid/openai/responses-schemas.json';
const COMPONENTS = '#/components/schemas/';
const DEFS = '#/$defs/';

const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'dependentSchemas']);
const DATA_KEYWORDS = new Set([
  'enum',
  'const',
  'default',
  'required',
  'discriminator',
  'example',
  'examples',
]);

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `schema` rebuilt bottom-up through `visit`, which sees every subschema and never a data value. */
function mapSchema(schema: unknown, visit: (node: JsonObject) => JsonObject): unknown {
  if (Array.isArray(schema)) return schema.map((item) => mapSchema(item, visit));
  if (!isObject(schema)) return schema;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(schema)) {
    if (DATA_KEYWORDS.has(key) || key.startsWith('x-')) out[key] = value;
    else if (SCHEMA_MAPS.has(key) && isObject(value)) {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, mapSchema(sub, visit)]),
      );
    } else out[key] = mapSchema(value, visit);
  }
  return visit(out);
}

/** OpenAPI's references and 2019-09's recursion, in the words Ajv's 2020-12 dialect knows. */
function toDraft2020(name: string, schema: unknown): unknown {
  return mapSchema(schema, (node) => {
    const { $recursiveRef, $recursiveAnchor: _anchor, ...rest } = node;
    if (typeof rest.$ref === 'string' && rest.$ref.startsWith(COMPONENTS)) {
      rest.$ref = DEFS + rest.$ref.slice(COMPONENTS.length);
    }
    if ($recursiveRef !== undefined) {
      if ($recursiveRef !== '#' || !isObject(schema) || schema.$recursiveAnchor !== true) {
        throw new Error(`${name}: a $recursiveRef this loader does not understand`);
      }
      rest.$ref = DEFS + name;
    }
    return rest;
  });
}

interface TypeConstraint {
  values: string[];
  required: boolean;
  object: boolean;
}

/** What a schema says of its `type` property, through its `$ref` and `allOf` (all of which apply). */
function typeConstraint(schema: unknown, defs: JsonObject, depth = 0): TypeConstraint {
  const found: TypeConstraint = { values: [], required: false, object: false };
  if (!isObject(schema) || depth > 8) return found;
  const parts = [...(Array.isArray(schema.allOf) ? schema.allOf : [])];
  if (typeof schema.$ref === 'string' && schema.$ref.startsWith(DEFS))
    parts.push(defs[schema.$ref.slice(DEFS.length)]);
  for (const part of parts) {
    const inner = typeConstraint(part, defs, depth + 1);
    found.values.push(...inner.values);
    found.required ||= inner.required;
    found.object ||= inner.object;
  }
  const type = isObject(schema.properties) ? schema.properties.type : undefined;
  if (isObject(type) && typeof type.const === 'string') found.values.push(type.const);
  else if (
    isObject(type) &&
    Array.isArray(type.enum) &&
    type.enum.length === 1 &&
    typeof type.enum[0] === 'string'
  ) {
    found.values.push(type.enum[0]);
  }
  if (Array.isArray(schema.required) && schema.required.includes('type')) found.required = true;
  if (schema.type === 'object') found.object = true;
  return found;
}

/** The single `type` a union member requires of an object it only accepts, if it requires one. */
function requiredType(member: unknown, defs: JsonObject): string | undefined {
  const { values, required, object } = typeConstraint(member, defs);
  const distinct = new Set(values);
  return object && required && distinct.size === 1 ? values[0] : undefined;
}

/** A discriminated `oneOf`/`anyOf` as one `if`/`then` per type (see the file's comment). */
function dispatchOnType(node: JsonObject, defs: JsonObject): JsonObject {
  for (const keyword of ['oneOf', 'anyOf'] as const) {
    const members = node[keyword];
    if (!Array.isArray(members) || members.length < 2) continue;
    const byType = new Map<string, unknown[]>();
    for (const member of members) {
      const type = requiredType(member, defs);
      if (type === undefined) return node;
      byType.set(type, [...(byType.get(type) ?? []), member]);
    }
    const { [keyword]: _union, ...rest } = node;
    // Members sharing a type (input and output messages) stay a union among themselves: a value of
    // that type can match no other member, so `oneOf` keeps its meaning.
    const cases = [...byType].map(([type, group]) => ({
      if: { properties: { type: { const: type } }, required: ['type'] },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's `then`; this object is a schema, never awaited.
      then: group.length === 1 ? group[0] : { [keyword]: group },
    }));
    const known = { type: 'object', properties: { type: { enum: [...byType.keys()] } }, required: ['type'] };
    const allOf = Array.isArray(rest.allOf) ? rest.allOf : [];
    return { ...rest, allOf: [...allOf, known, ...cases] };
  }
  return node;
}

/** Keywords of the fixture's dialect that annotate and do not constrain. */
function annotationKeywords(defs: JsonObject): string[] {
  const found = new Set(['discriminator', 'example']);
  mapSchema(defs, (node) => {
    for (const key of Object.keys(node)) if (key.startsWith('x-')) found.add(key);
    return node;
  });
  return [...found];
}

/** The fixture's roots: the answers of the operations under /v1/responses. */
export type ResponsesSchema = 'Response' | 'ResponseStreamEvent' | 'DeletedResponse' | 'ResponseItemList';

interface Validators {
  byRoot: Record<ResponsesSchema, ValidateFunction>;
  eventByType: Map<string, ValidateFunction>;
}

const loaded = new Map<boolean, Validators>();

/** Validators for the fixture's roots, with unions dispatched on `type` or left as published. */
function load(dispatch = true): Validators {
  const cached = loaded.get(dispatch);
  if (cached) return cached;
  const fixture = JSON.parse(readFileSync(FIXTURE, 'utf8')) as {
    roots: Record<ResponsesSchema, string>;
    components: { schemas: JsonObject };
  };
  const draft2020: JsonObject = {};
  for (const [name, schema] of Object.entries(fixture.components.schemas)) {
    draft2020[name] = toDraft2020(name, schema);
  }
  const defs: JsonObject = {};
  for (const [name, schema] of Object.entries(draft2020)) {
    defs[name] = dispatch ? mapSchema(schema, (node) => dispatchOnType(node, draft2020)) : schema;
  }

  const ajv = new Ajv2020({
    allErrors: true,
    strictTypes: false,
    strictTuples: false,
    strictRequired: false,
  });
  for (const keyword of annotationKeywords(defs)) ajv.addKeyword({ keyword });
  ajv.addFormat('unixtime', { type: 'number', validate: (n: number) => Number.isFinite(n) && n >= 0 });
  ajv.addFormat('float', { type: 'number', validate: (n: number) => Number.isFinite(n) });
  ajv.addFormat('uri', { type: 'string', validate: (s: string) => URL.canParse(s) });
  ajv.addSchema({ $id: DOCUMENT_ID, $defs: defs });

  const nameOf = (ref: unknown): string => {
    if (typeof ref !== 'string' || !ref.startsWith(COMPONENTS))
      throw new Error(`not a schema reference: ${ref}`);
    const name = ref.slice(COMPONENTS.length);
    if (!(name in defs)) throw new Error(`no schema named ${name} in the fixture`);
    return name;
  };
  const compile = (ref: unknown): ValidateFunction =>
    ajv.compile({ $ref: `${DOCUMENT_ID}${DEFS}${nameOf(ref)}` });

  // The stream's members, by the `type` each one requires, straight from the published union.
  const union = fixture.components.schemas[nameOf(fixture.roots.ResponseStreamEvent)];
  const members = isObject(union) ? (union.anyOf ?? union.oneOf) : undefined;
  if (!Array.isArray(members)) throw new Error('ResponseStreamEvent is not a union');
  const eventByType = new Map<string, ValidateFunction>();
  for (const member of members as JsonObject[]) {
    const type = requiredType(toDraft2020('ResponseStreamEvent', member), draft2020);
    if (type === undefined) throw new Error(`a stream event without a type: ${JSON.stringify(member)}`);
    eventByType.set(type, compile(member.$ref));
  }

  const validators: Validators = {
    byRoot: {
      Response: compile(fixture.roots.Response),
      ResponseStreamEvent: compile(fixture.roots.ResponseStreamEvent),
      DeletedResponse: compile(fixture.roots.DeletedResponse),
      ResponseItemList: compile(fixture.roots.ResponseItemList),
    },
    eventByType,
  };
  loaded.set(dispatch, validators);
  return validators;
}

function valueAt(body: unknown, pointer: string): unknown {
  let node = body;
  for (const part of pointer.split('/').slice(1)) {
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~');
    node = isObject(node) || Array.isArray(node) ? (node as Record<string, unknown>)[key] : undefined;
  }
  return node;
}

function describeError(body: unknown, error: ErrorObject): string {
  const where = error.instancePath || '(root)';
  const params = error.params as { allowedValues?: unknown[]; additionalProperty?: string };
  let detail = '';
  if (params.allowedValues) detail = ` (${params.allowedValues.map((v) => JSON.stringify(v)).join(', ')})`;
  if (params.additionalProperty) detail = ` (${params.additionalProperty})`;
  if (error.keyword === 'required') return `  ${where}: ${error.message}`;
  const got = JSON.stringify(valueAt(body, error.instancePath)) ?? 'undefined';
  const excerpt = got.length > 80 ? `${got.slice(0, 77)}...` : got;
  return `  ${where}: ${error.message}${detail}; got ${excerpt}`;
}

/** Ajv's errors without the `if`/`then` wrappers the dispatch adds, one line each. */
function formatErrors(body: unknown, errors: readonly ErrorObject[] | null | undefined): string {
  const lines = (errors ?? []).filter((e) => e.keyword !== 'if').map((e) => describeError(body, e));
  return [...new Set(lines)].join('\n');
}

function check(validate: ValidateFunction, what: string, body: unknown): void {
  if (validate(body)) return;
  throw new Error(`not a valid ${what} by OpenAI's schema:\n${formatErrors(body, validate.errors)}`);
}

/** Fails unless `body` is a Response object (POST /v1/responses, GET /v1/responses/{id}). */
export function expectValidResponse(body: unknown): void {
  check(load().byRoot.Response, 'Response', body);
}

/** Fails unless `event` is a Responses stream event: a known `type`, valid by that type's schema. */
export function expectValidStreamEvent(event: unknown): void {
  const { eventByType } = load();
  const type = isObject(event) ? event.type : undefined;
  const validate = typeof type === 'string' ? eventByType.get(type) : undefined;
  if (!validate) {
    const known = [...eventByType.keys()].sort().join(', ');
    throw new Error(`not a Responses stream event: type ${JSON.stringify(type)} is none of ${known}`);
  }
  check(validate, `${type} event`, event);
}

/** Fails unless `body` is the answer to DELETE /v1/responses/{id}. */
export function expectValidDeletedResponse(body: unknown): void {
  check(load().byRoot.DeletedResponse, 'deleted-response answer', body);
}

/** Fails unless `body` is the answer to GET /v1/responses/{id}/input_items. */
export function expectValidInputItemList(body: unknown): void {
  check(load().byRoot.ResponseItemList, 'input item list', body);
}

/**
 * Whether `body` is valid by one of the fixture's roots. `published: true` judges by the unions as
 * OpenAI wrote them, without the dispatch on `type`: the two must always agree.
 */
export function isValidByOpenAISchema(
  schema: ResponsesSchema,
  body: unknown,
  { published = false } = {},
): boolean {
  return load(!published).byRoot[schema](body) === true;
}
