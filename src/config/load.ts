import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { securityProblems } from '../net/policy.js';
import { parseDuration } from './duration.js';
import { ConfigError } from './error.js';
import { fleetProblems } from './fleet.js';
import { type Config, ConfigSchema } from './schema.js';

const DURATION = /^[0-9]+(ms|s|m|h|d)$/;

export { ConfigError } from './error.js';

interface JsonSchema {
  type?: string;
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  pattern?: string;
  /** What a pattern admits, in words, for error messages. */
  allowed?: string;
  description?: string;
}

/** Every leaf key of the schema with the environment variable that overrides it. */
export function configKeys(): Array<{ path: string[]; env: string; schema: JsonSchema }> {
  const keys: Array<{ path: string[]; env: string; schema: JsonSchema }> = [];
  const walk = (schema: JsonSchema, at: string[]) => {
    if (schema.type === 'object') {
      // Maps (engines, personas) have no fixed keys, hence no environment variables.
      for (const [name, child] of Object.entries(schema.properties ?? {})) walk(child, [...at, name]);
      return;
    }
    keys.push({ path: at, env: `KILN_${at.join('_').toUpperCase()}`, schema });
  };
  walk(ConfigSchema as JsonSchema, []);
  return keys;
}

/** Environment values are strings; turn them into what the key's type wants (validation follows). */
function fromEnv(raw: string, schema: JsonSchema): unknown {
  if (schema.type === 'integer' || schema.type === 'number') {
    return raw.trim() !== '' && Number.isFinite(Number(raw)) ? Number(raw) : raw;
  }
  if (schema.type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : raw;
  if (schema.type === 'array') {
    return raw
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  }
  return raw;
}

function setPath(target: Record<string, unknown>, at: string[], value: unknown) {
  let node = target;
  for (const key of at.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[at[at.length - 1] as string] = value;
}

function describeProblem(error: ErrorObject, sources: Map<string, string>): string {
  const key = error.instancePath.slice(1).replaceAll('/', '.');
  if (error.keyword === 'additionalProperties') {
    const extra = (error.params as { additionalProperty: string }).additionalProperty;
    const full = key ? `${key}.${extra}` : extra;
    if ((error.parentSchema as { patternProperties?: unknown } | undefined)?.patternProperties) {
      return `${full}: not a valid name; names are 1–64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit`;
    }
    return `${full}: unknown key (known keys: ${configKeys()
      .map((k) => k.path.join('.'))
      .join(', ')})`;
  }
  const source = sources.get(key);
  const from = source ? ` (from ${source})` : '';
  const schema = error.parentSchema as JsonSchema | undefined;
  let allowed = error.message ?? 'invalid';
  if (schema?.anyOf) allowed = `must be one of ${schema.anyOf.map((s) => String(s.const)).join(', ')}`;
  else if (schema?.type === 'integer')
    allowed = `must be an integer${schema.minimum !== undefined ? ` from ${schema.minimum}` : ''}${schema.maximum !== undefined ? ` to ${schema.maximum}` : ''}`;
  else if (error.keyword === 'maxMs')
    allowed = "must be a duration of at most 24d (Node's timers hold no more)";
  else if (error.keyword === 'minMs') allowed = `must be a duration of at least ${error.schema as number}ms`;
  else if (schema?.pattern) allowed = `must be ${schema.allowed ?? `text matching ${schema.pattern}`}`;
  return `${key}: ${allowed}; got ${JSON.stringify(error.data)}${from}`;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

export interface LoadOptions {
  /** Path given with --config; otherwise KILN_CONFIG, otherwise ./kiln.yaml when it exists. */
  file?: string | undefined;
  env?: NodeJS.ProcessEnv;
  /** Values that win over the file and environment (used by `kiln dev` and tests). */
  overrides?: Record<string, unknown>;
  /**
   * A file that holds no settings (empty, only comments, only `---`) is refused: a reload of one
   * caught half-way through a save would otherwise remove every engine, persona, runner and limit.
   */
  refuseEmpty?: boolean;
}

/** Reads kiln.yaml, applies KILN_* overrides, validates, fills derived defaults, freezes. */
export function loadConfig(options: LoadOptions = {}): Config & { configFile: string | undefined } {
  const env = options.env ?? process.env;
  const explicit = options.file ?? env.KILN_CONFIG;
  const file = explicit ?? (existsSync('kiln.yaml') ? 'kiln.yaml' : undefined);

  let raw: Record<string, unknown> = {};
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new ConfigError([`config file ${file}: ${(error as Error).message}`]);
    }
    let parsed: unknown;
    try {
      parsed = parseYaml(text);
    } catch (error) {
      throw new ConfigError([`config file ${file} is not valid YAML: ${(error as Error).message}`]);
    }
    if ((parsed === null || parsed === undefined) && options.refuseEmpty) {
      throw new ConfigError([
        `config file ${file} holds no settings: an empty file would remove every engine, persona, runner and limit`,
      ]);
    }
    if (parsed !== null && parsed !== undefined) {
      if (typeof parsed !== 'object' || Array.isArray(parsed)) {
        throw new ConfigError([`config file ${file} must hold a mapping of keys to values`]);
      }
      raw = parsed as Record<string, unknown>;
    }
  }

  const sources = new Map<string, string>();
  for (const key of configKeys()) {
    const value = env[key.env];
    if (value === undefined || value === '') continue;
    setPath(raw, key.path, fromEnv(value, key.schema));
    sources.set(key.path.join('.'), key.env);
  }
  for (const [dotted, value] of Object.entries(options.overrides ?? {}))
    setPath(raw, dotted.split('.'), value);

  const ajv = new Ajv({ allErrors: true, useDefaults: true, verbose: true, strict: false });
  // A duration a timer waits for must fit one (Duration's `maxMs`); the pattern is checked beside it.
  ajv.addKeyword({
    keyword: 'maxMs',
    type: 'string',
    schemaType: 'number',
    validate: (max: number, text: string) => !DURATION.test(text) || parseDuration(text) <= max,
  });
  // A duration some work repeats at must leave the process time for anything else (`minMs`).
  ajv.addKeyword({
    keyword: 'minMs',
    type: 'string',
    schemaType: 'number',
    validate: (min: number, text: string) => !DURATION.test(text) || parseDuration(text) >= min,
  });
  const validate = ajv.compile(ConfigSchema);
  if (!validate(raw)) {
    const errors = validate.errors ?? [];
    // A failed union also reports each of its branches; the union's own entry says it best.
    const unions = new Set(errors.filter((e) => e.keyword === 'anyOf').map((e) => e.instancePath));
    const problems = errors.filter((e) => e.keyword === 'anyOf' || !unions.has(e.instancePath));
    throw new ConfigError(problems.map((e) => describeProblem(e, sources)));
  }
  const config = raw as unknown as Config & { configFile: string | undefined; store: { url: string } };
  const problems = [...fleetProblems(config), ...securityProblems(config.security)];
  if (problems.length > 0) throw new ConfigError(problems);
  const dataDir = path.resolve(config.data_dir);
  const resolved = {
    ...config,
    data_dir: dataDir,
    public_url: config.public_url.replace(/\/+$/, ''),
    store: { ...config.store, url: config.store.url || `sqlite:${path.join(dataDir, 'kiln.db')}` },
    configFile: file,
  };
  return deepFreeze(resolved);
}
