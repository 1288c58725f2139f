import { type TSchema, Type } from '@sinclair/typebox';
import { ContextRef } from '../contexts/schemas.js';
import { Landing } from './landing.js';
import * as R from './responses.js';

/** Who may call an operation: a bearer key (the default), anyone, or a key or a signed URL. */
export type Auth = 'key' | 'none' | 'key-or-signature';

/** What the document says of one operation besides the request schemas its route validates with. */
export interface Operation {
  summary?: string;
  description?: string;
  auth?: Auth;
  /** By status code (or `default`); documentation only. */
  responses?: Record<string, unknown>;
  /** A `*` route's rest-of-path, named and with the schema the handler checks it against. */
  wildcard?: { name: string; schema: TSchema };
  /** Request headers, query parameters and a body the handler reads itself; documentation only. */
  headers?: TSchema;
  query?: TSchema;
  body?: TSchema;
}

/** Tags in the order the reference page shows them, and the paths each covers (first match wins). */
export const TAGS = [
  { name: 'Gateway', description: 'this page, the document and the landing page' },
  { name: 'Chat', description: 'OpenAI chat completions: sync, stream or async' },
  { name: 'Responses', description: 'OpenAI’s Responses API' },
  { name: 'Media', description: 'images and video, run as jobs' },
  { name: 'Files', description: 'produced media and their signed URLs' },
  { name: 'Jobs', description: 'every generation is a job: poll, list, cancel; usage' },
  { name: 'Contexts', description: 'the organisation’s context store' },
  { name: 'Models', description: 'personas and served models' },
  { name: 'MCP', description: 'the context store as MCP tools (Streamable HTTP, stateless)' },
  { name: 'Session', description: 'who a key is: what the console signs in with' },
  { name: 'Admin', description: 'organisations, keys and the fleet (admin keys only)' },
  { name: 'Operations', description: 'probes, metrics, reload' },
];

const TAG_PREFIXES: Array<[RegExp, string]> = [
  [/^\/v1\/chat\//, 'Chat'],
  [/^\/v1\/responses/, 'Responses'],
  [/^\/v1\/(images|videos)\//, 'Media'],
  [/^\/v1\/files\//, 'Files'],
  [/^(\/api)?\/v1\/(jobs|usage)/, 'Jobs'],
  [/^\/api\/v1\/contexts/, 'Contexts'],
  [/^\/v1\/models/, 'Models'],
  [/^\/mcp$/, 'MCP'],
  [/^\/api\/v1\/session$/, 'Session'],
  [/^\/admin\/v1\//, 'Admin'],
  [/^\/(healthz|readyz|metrics|admin\/reload)$/, 'Operations'],
];

export const tagOf = (url: string): string =>
  TAG_PREFIXES.find(([pattern]) => pattern.test(url))?.[1] ?? 'Gateway';

const ok = (schema: unknown) => ({ 200: schema, default: R.ErrorEnvelope });
const created = (schema: unknown) => ({ 201: schema, default: R.ErrorEnvelope });

const text = (description: string) => Type.String({ description });

/**
 * OpenAI's rate-limit headers, on every answer to a key (or organisation) with a per-minute limit;
 * describeRoute adds them to each success of an operation that takes a key.
 */
export const RATE_HEADERS = Object.fromEntries(
  ['requests', 'tokens'].flatMap((what) => [
    [`x-ratelimit-limit-${what}`, text(`with a per-minute ${what} limit: the limit`)],
    [`x-ratelimit-remaining-${what}`, text(`what is left of it`)],
    [`x-ratelimit-reset-${what}`, text('when it is whole again, e.g. `1s`, `6m0s`')],
  ]),
);

/** An answer with an `ETag` header: by default a context's, its id and version. */
const withEtag = <T extends object>(
  answer: T,
  what = 'the context’s id and version, e.g. `"ctx_….3"`',
): T => ({
  ...answer,
  headers: { ...(answer as { headers?: object }).headers, etag: text(what) },
});

/** A refusal by a rate limit or budget: its envelope names every limit broken. */
const RateLimited = {
  ...R.ErrorEnvelope,
  description:
    'a rate limit or budget refused the request; retry after `Retry-After` (absent, with `x-should-retry: false`, for a limit of 0)',
  headers: {
    'retry-after': Type.Integer({
      minimum: 0,
      description: 'seconds until the request may succeed; absent for a limit of 0, which never frees',
    }),
    'retry-after-ms': Type.Integer({ minimum: 0, description: 'the same, in milliseconds' }),
  },
};

const IdempotencyKey = text(
  'the same key and body within 24 hours (per organisation) answer the first job again; 1–255 printable ASCII',
);
/** What a submission reads from its headers, besides the key. */
const SUBMISSION_HEADERS = Type.Object({
  'Idempotency-Key': Type.Optional(IdempotencyKey),
  Prefer: Type.Optional(
    text(
      '`wait=N` with `mode: "async"`: 200 and the job (as its poll answers it) if it ends within N seconds, else 202',
    ),
  ),
});

/** A generation: its result (`sync`), or the job once over (`Prefer: wait=N`), else a 202 to poll. */
const submitted = (result: unknown) => ({
  200: result,
  202: {
    ...R.Submission,
    headers: { location: text('the job’s `polling_url`') },
  },
  429: RateLimited,
  default: R.ErrorEnvelope,
});

const JOBS: Record<string, Operation> = {};
for (const base of ['/v1/jobs', '/api/v1/jobs']) {
  JOBS[`GET ${base}`] = { summary: 'List the organisation’s jobs, newest first', responses: ok(R.JobList) };
  JOBS[`GET ${base}/:id`] = { summary: 'Poll a job of any kind', responses: ok(R.JobPoll) };
  JOBS[`POST ${base}/:id/cancel`] = { summary: 'Cancel a queued or running job', responses: ok(R.JobPoll) };
  JOBS[`DELETE ${base}/:id`] = {
    summary: 'Delete a finished job: its request, result and files (its usage is kept)',
    description: 'A queued or running job is 409 `conflict`: cancel it first.',
    responses: ok(R.JobDeleted),
  };
}

const ADMIN_ONLY = 'Admin keys only: any other key gets 403 `forbidden`.';

/** Operations by `METHOD url`, the url as the route registers it. */
const OPERATIONS: Record<string, Operation> = {
  'GET /': {
    summary: 'What this gateway is: version, links, the base URL for OpenAI clients',
    description: 'HTML for browsers; the same facts as JSON with `Accept: application/json`.',
    auth: 'none',
    responses: {
      200: {
        description: 'the landing page',
        content: { 'text/html': { schema: { type: 'string' } }, 'application/json': { schema: Landing } },
      },
    },
  },
  'GET /docs': {
    summary: 'This API reference, as a web page',
    auth: 'none',
    responses: { 200: R.ReferencePage },
  },
  'GET /openapi.json': {
    summary: 'This document (OpenAPI 3.1)',
    auth: 'none',
    responses: { 200: R.OpenApiDocument },
  },
  'GET /healthz': { summary: 'The process is up', auth: 'none', responses: ok(R.Health) },
  'GET /readyz': { summary: 'The store answers', auth: 'none', responses: ok(R.Ready) },
  'POST /v1/chat/completions': {
    summary: 'Chat completion, `sync`, `stream` or `async`',
    description:
      'OpenAI’s body plus Kiln’s `mode`, `webhook` and `contexts`; fields Kiln does not know pass through to the engine.',
    headers: SUBMISSION_HEADERS,
    responses: submitted(R.ChatAnswer),
  },
  'POST /v1/responses': {
    summary: 'OpenAI Responses API: sync, stream or background',
    headers: Type.Object({ 'Idempotency-Key': Type.Optional(IdempotencyKey) }),
    responses: { 200: R.ResponseAnswer, 429: RateLimited, default: R.ErrorEnvelope },
  },
  'GET /v1/responses/:id': {
    summary: 'Retrieve a stored response, or resume its event stream',
    responses: { 200: R.ResponseRetrieved, default: R.ErrorEnvelope },
  },
  'DELETE /v1/responses/:id': { summary: 'Delete a stored response', responses: ok(R.ResponseDeleted) },
  'POST /v1/responses/:id/cancel': {
    summary: 'Cancel a background response',
    responses: ok(R.ResponseEntry),
  },
  'GET /v1/responses/:id/input_items': {
    summary: 'The input items of a stored response',
    responses: ok(R.InputItems),
  },
  'GET /v1/models': { summary: 'Personas and the models the fleet serves', responses: ok(R.ModelList) },
  'GET /v1/models/*': {
    summary: 'One entry of the model list',
    description: 'The id may hold slashes (`meta-llama/Llama-3.1-8B-Instruct`), as they are or as `%2F`.',
    responses: ok(R.ModelEntry),
    wildcard: { name: 'id', schema: Type.String({ minLength: 1 }) },
  },
  'POST /v1/images/generations': {
    summary: 'Images, `sync` or `async`',
    headers: SUBMISSION_HEADERS,
    responses: submitted(R.ImagesAnswer),
  },
  'POST /v1/videos/generations': {
    summary: 'A video from a prompt (and an image); async, or waited for with `Prefer: wait=N`',
    headers: SUBMISSION_HEADERS,
    responses: submitted(R.VideoAnswer),
  },
  'POST /v1/videos/transitions': {
    summary: 'A video from a start image (to an end image); async, or waited for with `Prefer: wait=N`',
    headers: SUBMISSION_HEADERS,
    responses: submitted(R.VideoAnswer),
  },
  'GET /v1/files/:id': {
    summary: 'A produced file’s record and a fresh signed URL',
    responses: ok(R.FileEntry),
  },
  'DELETE /v1/files/:id': {
    summary: 'Delete a produced file: its record, bytes and URLs',
    responses: ok(R.FileDeleted),
  },
  'GET /v1/files/:id/content': {
    summary: 'The file’s bytes, with range requests',
    description:
      'Either a bearer key of the owning organisation or the signed URL’s `expires` and `signature` query parameters.',
    auth: 'key-or-signature',
    headers: Type.Object({
      Range: Type.Optional(text('one range, `bytes=start-end`, `bytes=start-` or `bytes=-suffix`')),
      'If-None-Match': Type.Optional(text('the ETag held: 304 while the content is the same')),
    }),
    query: Type.Object({
      expires: Type.Optional(Type.Integer({ description: 'a signed URL’s expiry, Unix seconds' })),
      signature: Type.Optional(text('a signed URL’s signature')),
    }),
    responses: {
      200: withEtag(R.FileContent, 'the content’s SHA-256, quoted'),
      206: withEtag(
        { ...R.FileContent, description: 'the requested range' },
        'the content’s SHA-256, quoted',
      ),
      304: withEtag(
        { ...R.NoContent, description: 'not modified (If-None-Match)' },
        'the content’s SHA-256, quoted',
      ),
      default: R.ErrorEnvelope,
    },
  },
  'POST /api/v1/contexts': {
    summary: 'Save a context: create it (201) or replace it as a new version (200)',
    description:
      'With `If-None-Match: *` it only creates; with `If-Match` it only replaces the version whose ETag is given, so a save never overwrites a teammate’s change unseen. A refused save is 412, with the context as it stands.',
    headers: Type.Object({
      'If-None-Match': Type.Optional(text('`*`: create only; 412 `context-exists` when the name is taken')),
      'If-Match': Type.Optional(
        text(
          'ETags (`"ctx_….3"`, from a save or fetch) or `*`: replace only that version (any, for `*`); else 412 `context-changed`',
        ),
      ),
    }),
    responses: {
      200: withEtag(R.ContextSaved),
      201: withEtag(R.ContextSaved),
      412: R.ContextConflict,
      default: R.ErrorEnvelope,
    },
  },
  'GET /api/v1/contexts': { summary: 'List contexts, without content', responses: ok(R.ContextList) },
  'GET /api/v1/contexts/*': {
    summary: 'Fetch one context, with content',
    description: 'The id (`ctx_…`) or the name; a name may hold `/`, encoded or not.',
    wildcard: { name: 'id_or_name', schema: ContextRef },
    headers: Type.Object({
      'If-None-Match': Type.Optional(
        text('the ETag held: 304, without the content, while it is that version'),
      ),
    }),
    responses: {
      200: withEtag(R.ContextWithContent),
      304: withEtag({ ...R.NoContent, description: 'not modified (If-None-Match)' }),
      default: R.ErrorEnvelope,
    },
  },
  'DELETE /api/v1/contexts/*': {
    summary: 'Delete one context',
    description:
      'The id (`ctx_…`) or the name; a name may hold `/`, encoded or not. With `If-Match` it deletes only the version whose ETag is given; a teammate’s later version is 412, with the context as it stands.',
    wildcard: { name: 'id_or_name', schema: ContextRef },
    headers: Type.Object({
      'If-Match': Type.Optional(
        text(
          'ETags (`"ctx_….3"`, from a save or fetch) or `*`: delete only that version (any, for `*`); else 412 `context-changed`',
        ),
      ),
    }),
    responses: {
      200: R.ContextDeleted,
      412: R.ContextConflict,
      default: R.ErrorEnvelope,
    },
  },
  ...JOBS,
  'GET /api/v1/jobs/:id/details': {
    summary: 'A job with its request (long strings cut), its route and its webhook delivery',
    description: 'What the console shows of a job. The webhook’s URL comes without its query string.',
    responses: ok(R.JobDetails),
  },
  'GET /api/v1/usage/daily': {
    summary: 'Usage per UTC day, kind and key, over the last `days` days',
    responses: ok(R.UsageDaily),
  },
  'GET /api/v1/session': {
    summary: 'Who the key is: its role, tier and organisation (never the key itself)',
    responses: ok(R.Session),
  },
  'GET /api/v1/usage': {
    summary: 'Usage per kind, and where the key and its organisation stand against their limits',
    responses: ok(R.Usage),
  },
  'POST /mcp': {
    summary: 'MCP over Streamable HTTP, stateless',
    description:
      'Each POST carries one JSON-RPC 2.0 message (send `Accept: application/json, text/event-stream`); ' +
      'the tools act on the key’s organisation’s contexts. Protocol errors are JSON-RPC errors.',
    body: Type.Object(
      {
        jsonrpc: Type.Literal('2.0'),
        method: text('e.g. `initialize`, `tools/list`, `tools/call`, `resources/read`'),
        id: Type.Optional(
          Type.Union([Type.String(), Type.Integer()], { description: 'absent in a notification' }),
        ),
        params: Type.Optional(Type.Object({})),
      },
      { description: 'one JSON-RPC 2.0 request or notification' },
    ),
    responses: {
      200: R.McpAnswer,
      202: { ...R.NoContent, description: 'a notification, accepted' },
      400: R.McpBadRequest,
      401: { ...R.ErrorEnvelope, description: 'no key, or a bad one: the bearer key is what is wanted' },
      406: R.McpRefused('Accept does not name both application/json and text/event-stream'),
      default: R.ErrorEnvelope,
    },
  },
  'GET /mcp': {
    summary: 'Always 405: this MCP endpoint is stateless',
    responses: { 405: R.ErrorEnvelope, default: R.ErrorEnvelope },
  },
  'DELETE /mcp': {
    summary: 'Always 405: this MCP endpoint is stateless',
    responses: { 405: R.ErrorEnvelope, default: R.ErrorEnvelope },
  },
  'POST /admin/reload': {
    summary: 'Re-read engines, personas and routing from the configuration file',
    description: ADMIN_ONLY,
    responses: ok(R.Reloaded),
  },
  'GET /metrics': {
    summary: 'Prometheus metrics: jobs, engines, runners, webhooks, HTTP, store, routing, limits, process',
    description: 'Any live key; none at all where the gateway is configured with `metrics.open`.',
    responses: { 200: R.Metrics, default: R.ErrorEnvelope },
  },
  'GET /admin/v1/orgs': {
    summary: 'List organisations',
    description: ADMIN_ONLY,
    responses: ok(R.OrganizationList),
  },
  'POST /admin/v1/orgs': {
    summary: 'Create an organisation',
    description: `${ADMIN_ONLY} A name that is taken is 409 \`conflict\`.`,
    responses: created(R.OrganizationEntry),
  },
  'PATCH /admin/v1/orgs/:name': {
    summary: 'Set or remove an organisation’s limits',
    description: `${ADMIN_ONLY} A whole number sets a limit, null removes it; limits not named are kept.`,
    responses: ok(R.OrganizationEntry),
  },
  'GET /admin/v1/fleet': {
    summary: 'Engine pools, their replicas and the runners, as this gateway sees them now',
    description: `${ADMIN_ONLY} Replicas are named by engine and index, never by address.`,
    responses: ok(R.Fleet),
  },
  'GET /admin/v1/keys': { summary: 'List keys', description: ADMIN_ONLY, responses: ok(R.ApiKeyList) },
  'POST /admin/v1/keys': {
    summary: 'Create a key (shown once)',
    description: ADMIN_ONLY,
    responses: created(R.ApiKeyCreated),
  },
  'PATCH /admin/v1/keys/:id': {
    summary: 'Change a live key’s tier or limits',
    description: ADMIN_ONLY,
    responses: ok(R.ApiKeyEntry),
  },
  'DELETE /admin/v1/keys/:id': {
    summary: 'Revoke a key (401 from then on)',
    description: ADMIN_ONLY,
    responses: ok(R.ApiKeyEntry),
  },
};

/** What the document says of `method url`; a route not in the table is still documented, plainly. */
export const operationOf = (method: string, url: string): Operation => OPERATIONS[`${method} ${url}`] ?? {};
