import { type TSchema, Type } from '@sinclair/typebox';
import { errorCatalogue } from '../errors.js';
import { JOB_STATUSES } from '../jobs/schemas.js';
import { LIMIT_NAMES } from '../limits/schema.js';

/**
 * What the API answers, for the OpenAPI document only: Fastify never serialises a reply through
 * these (its response schemas drop unknown fields), so they describe without changing a byte.
 * Objects stay open (extra fields allowed) where the API may add fields; test/docs checks live
 * answers against them.
 */

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const UnixSeconds = Type.Integer({ minimum: 0, description: 'Unix seconds' });
const oneOf = (values: readonly string[], description?: string) =>
  Type.Unsafe<string>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });

const ErrorDetail = Type.Object({
  field: Type.String(),
  rule: Type.String(),
  message: Type.String(),
});

/** The envelope of every non-2xx answer, its codes and types taken from the error catalogue. */
export const ErrorEnvelope = Type.Object(
  {
    error: Type.Object({
      type: oneOf([...new Set(Object.values(errorCatalogue).map((entry) => entry.type))]),
      code: oneOf(Object.keys(errorCatalogue), 'kebab-case, from the error catalogue'),
      message: Type.String(),
      param: Nullable(Type.String()),
      details: Type.Optional(Type.Array(ErrorDetail, { minItems: 1 })),
    }),
  },
  { description: 'the error envelope (DESIGN.md section 2); some codes attach fields beside `error`' },
);

/** A JSON answer of `status` described as `description`. */
const json = (schema: TSchema, description: string): TSchema => ({ ...schema, description });

const List = (item: TSchema, extra: Record<string, TSchema> = {}) =>
  Type.Object({ object: Type.Literal('list'), data: Type.Array(item), ...extra });

export const Health = json(Type.Object({ status: Type.Literal('ok') }), 'the process is up');
export const Ready = json(
  Type.Object({ status: Type.Literal('ready'), store: oneOf(['sqlite', 'postgres']) }),
  'the store answers',
);

export const OpenApiDocument = json(
  Type.Object({ openapi: Type.String(), info: Type.Object({}), paths: Type.Object({}) }),
  'this document',
);

const Model = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: UnixSeconds,
  owned_by: Type.String(),
  kind: Type.String({ description: 'chat, image, video, …' }),
  ready: Type.Boolean({ description: 'a replica or runner serves it now' }),
});
export const ModelEntry = json(Model, 'the model');
export const ModelList = json(List(Model), 'personas and the models the fleet serves');

const Context = Type.Object({
  id: Type.String({ pattern: '^ctx_' }),
  object: Type.Literal('context'),
  name: Type.String(),
  description: Nullable(Type.String()),
  size_bytes: Type.Integer({ minimum: 0 }),
  sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  version: Type.Integer({ minimum: 1 }),
  shared: Type.Literal('org'),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
  created_by: Type.String(),
});
export const ContextSaved = json(Context, 'the context, without its content');
/** A conditional save refused: the envelope, and the context as it stands when there is one. */
export const ContextConflict = json(
  Type.Intersect([ErrorEnvelope, Type.Object({ context: Type.Optional(Context) })]),
  'the save’s precondition did not hold (`context-exists`, `context-changed`); nothing was saved',
);
export const ContextWithContent = json(
  Type.Composite([Context, Type.Object({ content: Type.String() })]),
  'the context with its content',
);
export const ContextList = json(List(Context, { has_more: Type.Boolean() }), 'the contexts, without content');
/** `{id, object, deleted: true}`: what every DELETE of a job, file or context answers. */
const deleted = (object: string) =>
  json(
    Type.Object({ id: Type.String(), object: Type.Literal(object), deleted: Type.Literal(true) }),
    'deleted',
  );
export const JobDeleted = deleted('job');
export const FileDeleted = deleted('file');
export const ContextDeleted = json(
  Type.Object({ id: Type.String(), object: Type.Literal('context'), deleted: Type.Literal(true) }),
  'deleted',
);

const Job = Type.Object({
  id: Type.String(),
  object: Type.Literal('job'),
  kind: Type.String(),
  status: oneOf(JOB_STATUSES),
  created: UnixSeconds,
  started_at: Nullable(UnixSeconds),
  finished_at: Nullable(UnixSeconds),
  progress: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  result: Type.Optional(Type.Unknown({ description: 'the kind’s result, once completed' })),
  code: Type.Optional(Type.String({ description: 'why it failed, timed out or was cancelled' })),
  message: Type.Optional(Nullable(Type.String())),
});
export const JobPoll = json(Job, 'the job as it stands');
export const JobList = json(
  List(Job, { has_more: Type.Boolean(), last_id: Nullable(Type.String()) }),
  'newest first',
);

/** The 202 of an async submission (or of `Prefer: wait=N` that ran out). */
export const Submission = json(
  Type.Object({
    id: Type.String(),
    object: Type.String({ description: 'e.g. chat.completion.async, video.transition' }),
    status: Type.Union([Type.Literal('queued'), Type.Literal('running')], {
      description: '`queued`; after a `Prefer: wait=N` that ran out, as the job stands then',
    }),
    polling_url: Type.String({ description: 'GET it for the job' }),
    created: UnixSeconds,
  }),
  'accepted: poll `polling_url` (also in `Location`) or wait for the webhook',
);

/** What the console shows of one job: the job, its request (long strings cut), route and webhook. */
export const JobDetails = json(
  Type.Object({
    object: Type.Literal('job.details'),
    job: Job,
    mode: oneOf(['sync', 'stream', 'async']),
    attempts: Type.Integer({ minimum: 0 }),
    request: Type.Unknown({ description: 'the stored request, every string over 200 characters cut' }),
    route: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], {
      description:
        'where it ran (a chat or response job): class, engine and replica index, never the address; null for none',
    }),
    webhook: Nullable(
      Type.Object({
        url: Nullable(Type.String({ description: 'the receiver, without its query string' })),
        delivery: Nullable(
          Type.Object({
            status: Type.String(),
            event: Type.String(),
            attempts: Type.Integer({ minimum: 0 }),
            last_status: Nullable(Type.Integer()),
            last_error: Nullable(Type.String()),
            created_at: Nullable(UnixSeconds),
            next_attempt_at: Nullable(UnixSeconds),
            delivered_at: Nullable(UnixSeconds),
          }),
        ),
      }),
    ),
  }),
  'the job with its request, route and webhook delivery',
);

const Standing = Type.Object({
  limit: Type.Integer(),
  used: Type.Integer(),
  remaining: Type.Integer(),
  resets_at: Nullable(Type.String()),
});
const Standings = Type.Object(
  Object.fromEntries(LIMIT_NAMES.map((name) => [name, Type.Optional(Standing)])),
  { additionalProperties: false },
);
export const Usage = json(
  Type.Object({
    object: Type.Literal('usage'),
    since: UnixSeconds,
    until: UnixSeconds,
    data: Type.Array(
      Type.Object({
        kind: Type.String(),
        jobs: Type.Integer(),
        completed: Type.Integer(),
        failed: Type.Integer(),
        cancelled: Type.Integer(),
        timeout: Type.Integer(),
        run_ms: Type.Number(),
        input_units: Type.Number(),
        output_units: Type.Number(),
      }),
    ),
    limits: Type.Object({ key: Standings, org: Standings }),
  }),
  'usage per kind in the period, and where the key and its organisation stand against their limits',
);

export const UsageDaily = json(
  Type.Object({
    object: Type.Literal('list'),
    since: UnixSeconds,
    until: UnixSeconds,
    data: Type.Array(
      Type.Object({
        day: Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', description: 'UTC' }),
        kind: Type.String(),
        key_id: Type.String(),
        jobs: Type.Integer(),
        completed: Type.Integer(),
        run_ms: Type.Number(),
        input_units: Type.Number(),
        output_units: Type.Number(),
      }),
    ),
  }),
  'usage per UTC day, kind and key, oldest day first',
);

const Limits = Type.Object(
  Object.fromEntries(LIMIT_NAMES.map((name) => [name, Type.Optional(Type.Integer())])),
  {
    additionalProperties: false,
  },
);
const Organization = Type.Object({
  object: Type.Literal('organization'),
  id: Type.String(),
  name: Type.String(),
  created_at: Nullable(UnixSeconds),
  limits: Limits,
});
const ApiKey = Type.Object({
  object: Type.Literal('api_key'),
  id: Type.String(),
  org_id: Type.String(),
  org: Type.String(),
  prefix: Type.String(),
  name: Nullable(Type.String()),
  tier: oneOf(['free', 'standard']),
  role: oneOf(['member', 'admin']),
  limits: Limits,
  created_at: Nullable(UnixSeconds),
  revoked_at: Nullable(UnixSeconds),
});
export const OrganizationEntry = json(Organization, 'the organisation');
export const OrganizationList = json(List(Organization), 'every organisation');
export const ApiKeyEntry = json(ApiKey, 'the key (never the key itself)');
export const ApiKeyList = json(List(ApiKey), 'keys, never the keys themselves or their hashes');
export const ApiKeyCreated = json(
  Type.Composite([ApiKey, Type.Object({ key: Type.String({ pattern: '^kiln_sk_' }) })]),
  'created: `key` is shown here only, then stored as its hash',
);

export const Session = json(
  Type.Object({
    object: Type.Literal('session'),
    key: Type.Object({
      id: Type.String(),
      prefix: Type.String(),
      name: Nullable(Type.String()),
      role: oneOf(['member', 'admin']),
      tier: oneOf(['free', 'standard']),
    }),
    org: Type.Object({ id: Type.String(), name: Type.String() }),
    contexts_max_bytes: Type.Integer({ minimum: 0 }),
  }),
  'who the key is (never the key itself), its organisation, and the largest context it may save',
);

export const Fleet = json(
  Type.Object({
    object: Type.Literal('fleet'),
    pools: Type.Array(
      Type.Object({
        name: Type.String(),
        adapter: Type.String(),
        overflow: Type.Boolean(),
        models: Type.Array(Type.String()),
        requests: Type.Integer({ minimum: 0 }),
        overflow_requests: Type.Integer({ minimum: 0 }),
        replicas: Type.Array(
          Type.Object({
            index: Type.Integer({ minimum: 0 }),
            healthy: Type.Boolean(),
            available: Type.Boolean(),
            in_flight: Type.Integer({ minimum: 0 }),
            max_concurrency: Type.Integer(),
            engine_load: Nullable(Type.Number()),
            context_tokens: Nullable(Type.Integer()),
            prompt_tokens: Type.Number(),
            cached_tokens: Type.Number(),
          }),
        ),
      }),
    ),
    runners: Type.Array(
      Type.Object({
        name: Type.String(),
        models: Type.Array(Type.String()),
        available: Type.Boolean({ description: 'it answered its last health check (GET /system_stats)' }),
        in_flight: Type.Integer({ minimum: 0 }),
        max_concurrency: Type.Integer(),
      }),
    ),
  }),
  'the engine pools, their replicas (by index, never by address) and the runners, as this gateway sees them now',
);

export const Reloaded = json(
  Type.Object({ reloaded: Type.Literal(true), models: Type.Array(Type.String()) }),
  'the new configuration is in force',
);

const FileRecord = Type.Object({
  id: Type.String({ pattern: '^file_' }),
  object: Type.Literal('file'),
  content_type: Type.String(),
  size_bytes: Type.Integer({ minimum: 0 }),
  sha256: Type.String(),
  width: Nullable(Type.Integer()),
  height: Nullable(Type.Integer()),
  duration_ms: Nullable(Type.Integer()),
  fps: Nullable(Type.Number()),
  created_at: UnixSeconds,
  job_id: Nullable(Type.String()),
  url: Type.String({ description: 'a fresh signed URL of the content' }),
});
export const FileEntry = json(FileRecord, 'the file record');

const ChatCompletion = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: UnixSeconds,
  model: Type.String(),
  choices: Type.Array(
    Type.Object({
      index: Type.Integer(),
      message: Type.Object({ role: Type.String(), content: Nullable(Type.String()) }),
      finish_reason: Nullable(Type.String()),
    }),
  ),
});

const ImagesResult = Type.Object({
  created: UnixSeconds,
  data: Type.Array(
    Type.Object({ url: Type.Optional(Type.String()), b64_json: Type.Optional(Type.String()) }),
  ),
});

const ResponseObject = Type.Object({
  id: Type.String({ pattern: '^resp_' }),
  object: Type.Literal('response'),
  status: Type.String(),
  output: Type.Array(Type.Object({})),
});
export const ResponseEntry = json(ResponseObject, 'the response (OpenAI’s Responses API object)');
export const ResponseDeleted = json(
  Type.Object({ id: Type.String(), object: Type.Literal('response'), deleted: Type.Literal(true) }),
  'deleted',
);
export const InputItems = json(
  List(Type.Object({}), {
    has_more: Type.Boolean(),
    first_id: Nullable(Type.String()),
    last_id: Nullable(Type.String()),
  }),
  'the input items of the response',
);

/** A response Swagger takes as is: its own media types (text, bytes, an event stream). */
const media = (description: string, content: Record<string, TSchema>) => ({
  description,
  content: Object.fromEntries(Object.entries(content).map(([type, schema]) => [type, { schema }])),
});

const EventStream = Type.String({ description: 'server-sent events, as OpenAI streams them' });

/** An async submission that ended within its `Prefer: wait=N`: the job, as its poll answers it. */
const Waited = (result: TSchema) =>
  Type.Object(
    { ...Job.properties, result: Type.Optional(result) },
    { description: 'the job (`Prefer: wait=N`)' },
  );

export const ChatAnswer = media(
  'the completion (`sync`), its chunks as server-sent events (`stream`), or the job once over (`async` with `Prefer: wait=N`)',
  {
    'application/json': Type.Union([ChatCompletion, Waited(ChatCompletion)]),
    'text/event-stream': EventStream,
  },
);
export const ResponseAnswer = media('the response, or its events as server-sent events (`stream: true`)', {
  'application/json': ResponseObject,
  'text/event-stream': EventStream,
});
export const ResponseRetrieved = media('the response, or its events again (`stream=true`)', {
  'application/json': ResponseObject,
  'text/event-stream': EventStream,
});
export const ImagesAnswer = json(
  Type.Union([ImagesResult, Waited(ImagesResult)]),
  'the images (`sync`), or the job once over (`async` with `Prefer: wait=N`)',
);

const VideoResult = Type.Object({
  url: Type.String({ description: 'a signed URL of the video' }),
  file_id: Type.String({ pattern: '^file_' }),
  duration_ms: Nullable(Type.Integer()),
  width: Nullable(Type.Integer()),
  height: Nullable(Type.Integer()),
  fps: Nullable(Type.Number()),
  content_type: Type.String(),
  seed: Type.Integer({ description: 'render the same clip again with it' }),
});
export const VideoAnswer = json(Waited(VideoResult), 'the job, when it ended within `Prefer: wait=N`');
export const ReferencePage = media('the reference page (Swagger UI, served from this gateway)', {
  'text/html': Type.String(),
});
export const Metrics = media('Prometheus text format', {
  'text/plain': Type.String(),
});
export const FileContent = media('the file’s bytes, in its own content type', {
  '*/*': Type.String({ description: 'binary' }),
});
export const McpAnswer = media('the JSON-RPC 2.0 answer', {
  'application/json': Type.Object({ jsonrpc: Type.Literal('2.0') }),
});
const JsonRpcError = Type.Object({
  jsonrpc: Type.Literal('2.0'),
  id: Nullable(Type.Union([Type.String(), Type.Number()])),
  error: Type.Object({ code: Type.Integer(), message: Type.String(), data: Type.Optional(Type.Unknown()) }),
});
/** What the MCP transport itself refuses, in JSON-RPC's terms rather than the error envelope's. */
export const McpRefused = (description: string) => media(description, { 'application/json': JsonRpcError });
export const McpBadRequest = media(
  'a body that is JSON but no JSON-RPC message (a JSON-RPC error), or no JSON at all (the error envelope)',
  { 'application/json': Type.Union([JsonRpcError, ErrorEnvelope]) },
);
export const NoContent = { description: 'no body', type: 'null' };
