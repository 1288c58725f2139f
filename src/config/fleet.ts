import { type Static, Type } from '@sinclair/typebox';
import { Duration } from './duration.js';

/**
 * The fleet: engine pools, personas and routing. Maps are keyed by name, so names are unique by
 * construction; they have no environment variables (edit kiln.yaml and reload).
 */

const NAME = '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$';

export const REQUEST_CLASSES = ['shared-prefix', 'unique', 'long-context'] as const;

export const ROUTING_POLICIES = ['cache-aware', 'least-load', 'round-robin', 'sglang'] as const;

const PoolRoutingSchema = Type.Object(
  {
    policy: Type.Union(
      ROUTING_POLICIES.map((p) => Type.Literal(p)),
      {
        default: 'cache-aware',
        description:
          'replica choice: cache-aware (prefill cost plus load), least-load, round-robin, or sglang (SGLang router’s cache-aware policy, for comparison)',
      },
    ),
    balance_abs_threshold: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        description:
          'cache-aware: a replica with this many more requests in flight than the least busy one takes no new request (default: half the pool’s max_concurrency)',
      }),
    ),
  },
  { default: {}, additionalProperties: false },
);

export const EngineSchema = Type.Object(
  {
    adapter: Type.Union([Type.Literal('openai')], {
      default: 'openai',
      description:
        'protocol: openai = any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama /v1, TGI)',
    }),
    serves: Type.Union(
      REQUEST_CLASSES.map((c) => Type.Literal(c)),
      { default: 'unique', description: 'the request class this pool is for' },
    ),
    replicas: Type.Array(
      Type.String({ pattern: '^https?://[^\\s]+$', allowed: 'an http:// or https:// base URL' }),
      {
        minItems: 1,
        description: 'base URLs of the replicas (without /v1)',
      },
    ),
    models: Type.Record(Type.String({ pattern: NAME }), Type.String({ minLength: 1 }), {
      description: 'public model name → the name the engine knows it by',
    }),
    max_concurrency: Type.Integer({
      default: 16,
      minimum: 1,
      maximum: 10_000,
      description: 'requests in flight per replica',
    }),
    timeout: Duration('120s', 'longest wait for an answer (for a stream: between chunks)'),
    connect_timeout: Duration('5s', 'longest wait to connect to a replica'),
    overflow: Type.Boolean({
      default: false,
      description: 'cloud capacity used only when local replicas are full or down',
    }),
    api_key: Type.Optional(Type.String({ description: 'sent as Authorization: Bearer to the replicas' })),
    health_path: Type.String({
      default: '/health',
      pattern: '^/',
      description: 'polled to know a replica is up',
    }),
    owned_by: Type.String({ default: 'kiln', description: '`owned_by` of its models in /v1/models' }),
    routing: PoolRoutingSchema,
    kv_cache_tokens: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'KV cache capacity of each replica in tokens; default: read from the engine (vLLM metrics), else 131072',
      }),
    ),
    context_tokens: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'longest prompt plus output a replica accepts; default: read from the engine (/v1/models max_model_len, /props n_ctx)',
      }),
    ),
    cache_salt: Type.Boolean({
      default: false,
      description:
        "the engine takes OpenAI-style cache_salt (vLLM; SGLang since sgl-project/sglang#23300): with routing.cache_scope organisation each organisation's requests carry their own, so no organisation's prompts are found in another's in the engine's own prefix cache",
    }),
    vision: Type.Optional(
      Type.Boolean({
        description:
          'whether the model reads images; default: read from the engine (llama.cpp /props modalities.vision), else assumed',
      }),
    ),
  },
  { additionalProperties: false },
);

export const PersonaSchema = Type.Object(
  {
    // Any name an engine's `models` may give, such as meta-llama/Llama-3.1-8B-Instruct.
    model: Type.String({ minLength: 1, description: 'a model some local engine serves' }),
    description: Type.Optional(Type.String()),
    system: Type.Optional(Type.String({ description: 'system preamble put before the caller’s messages' })),
    contexts: Type.Array(Type.String(), {
      default: [],
      description: 'context names whose content is prepended',
    }),
    defaults: Type.Record(Type.String(), Type.Unknown(), {
      default: {},
      description: 'request fields used when the caller gives none (temperature, max_tokens, …)',
    }),
    shared_preamble: Type.Boolean({
      default: false,
      description: 'route as shared-prefix: every request of the persona starts the same way',
    }),
  },
  { additionalProperties: false },
);

export const RunnerSchema = Type.Object(
  {
    url: Type.String({
      pattern: '^https?://[^\\s]+$',
      allowed: 'an http:// or https:// base URL',
      description: 'the ComfyUI server',
    }),
    models: Type.Array(Type.String({ pattern: NAME }), {
      minItems: 1,
      description: 'Kiln models whose workflow this runner can run (wan-2.2, ltx-video, ltx-2.3, sdxl)',
    }),
    max_concurrency: Type.Integer({
      default: 1,
      minimum: 1,
      maximum: 64,
      description: 'prompts in flight on the runner',
    }),
    timeout: Duration('30m', 'longest a prompt may take on the runner'),
  },
  { additionalProperties: false },
);

export const FleetSchema = {
  runners: Type.Record(Type.String({ pattern: NAME }), RunnerSchema, {
    default: {},
    additionalProperties: false,
  }),
  engines: Type.Record(Type.String({ pattern: NAME }), EngineSchema, {
    default: {},
    additionalProperties: false,
  }),
  personas: Type.Record(Type.String({ pattern: NAME }), PersonaSchema, {
    default: {},
    additionalProperties: false,
  }),
  routing: Type.Object(
    {
      long_context_tokens: Type.Integer({
        default: 8000,
        minimum: 1,
        description: 'prompt tokens above which a request is long-context',
      }),
      shared_prefix_tokens: Type.Integer({
        default: 512,
        minimum: 1,
        description:
          'a prompt whose leading system messages (persona, contexts) reach this many tokens is shared-prefix',
      }),
      overflow_after_ms: Type.Integer({
        default: 500,
        minimum: 0,
        description: 'how long a request waits for a full local fleet before overflow may take it',
      }),
      queue_timeout: Duration('60s', 'how long a request waits for a free replica before it times out'),
      cache_scope: Type.Union([Type.Literal('organisation'), Type.Literal('shared')], {
        default: 'organisation',
        description:
          "whose prompts a prompt may find cached: its organisation's only (prefix routing per organisation, and each organisation's own cache_salt to engines with cache_salt: true), or everyone's",
      }),
      prefix_block_chars: Type.Integer({
        default: 256,
        minimum: 16,
        maximum: 65_536,
        description: 'block size, in characters, of the prefix index that follows what each replica caches',
      }),
    },
    { default: {}, additionalProperties: false },
  ),
};

/** Fleet rules the schema cannot express; each problem names the key. */
export function fleetProblems(config: FleetConfig): string[] {
  const problems: string[] = [];
  // The schema's pattern lets through text no URL parser takes (`http://[oops`): such a fleet would
  // load, and serve nothing.
  const unparsable = (where: string, url: string) => {
    if (!URL.canParse(url)) problems.push(`${where}: '${url}' is not a URL`);
  };
  for (const [name, engine] of Object.entries(config.engines))
    for (const [i, url] of engine.replicas.entries()) unparsable(`engines.${name}.replicas.${i}`, url);
  for (const [name, runner] of Object.entries(config.runners ?? {}))
    unparsable(`runners.${name}.url`, runner.url);
  const local = new Set<string>();
  for (const engine of Object.values(config.engines)) {
    if (!engine.overflow) for (const model of Object.keys(engine.models)) local.add(model);
  }
  for (const [name, engine] of Object.entries(config.engines)) {
    if (!engine.overflow) continue;
    for (const model of Object.keys(engine.models)) {
      if (!local.has(model)) {
        problems.push(
          `engines.${name}.models.${model}: an overflow engine only takes excess load; no local engine serves ${model}`,
        );
      }
    }
  }
  for (const [name, persona] of Object.entries(config.personas)) {
    if (!local.has(persona.model))
      problems.push(`personas.${name}.model: no local engine serves ${persona.model}`);
  }
  return problems;
}

/** The fleet part of the configuration. */
export interface FleetConfig {
  engines: Record<string, Static<typeof EngineSchema>>;
  personas: Record<string, Static<typeof PersonaSchema>>;
  runners?: Record<string, Static<typeof RunnerSchema>>;
}
