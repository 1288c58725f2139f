import { type Static, Type } from '@sinclair/typebox';
import { LimitsSchema } from '../limits/schema.js';
import { Duration } from './duration.js';
import { FleetSchema } from './fleet.js';

export { parseDuration } from './duration.js';

/**
 * Every configuration key Kiln reads, with its default. `kiln.yaml` uses these names; each leaf
 * can also be set by environment as KILN_ + its path in upper case joined by `_`
 * (store.url → KILN_STORE_URL, port → KILN_PORT). docs/configuration.md mirrors this file.
 */
export const ConfigSchema = Type.Object(
  {
    host: Type.String({ default: '127.0.0.1', minLength: 1, description: 'address the HTTP server binds' }),
    port: Type.Integer({
      default: 8080,
      minimum: 0,
      maximum: 65535,
      description: 'HTTP port (0 = any free port)',
    }),
    public_url: Type.String({
      default: '',
      pattern: '^(https?://[^\\s]+)?$',
      allowed: 'an absolute http:// or https:// URL',
      description: 'absolute base URL clients reach the gateway at; default http://<host>:<port>',
    }),
    shutdown_grace: Duration(
      '30s',
      'on SIGTERM, how long requests in flight and running jobs get to finish before jobs are handed back',
    ),
    data_dir: Type.String({
      default: './data',
      minLength: 1,
      description: 'where the SQLite store and admin.key live',
    }),
    store: Type.Object(
      {
        url: Type.String({
          default: '',
          pattern: '^(|sqlite:.+|postgres(ql)?://.+)$',
          allowed: 'sqlite:<path> or postgres://…',
          description: 'sqlite:<path> or postgres://…; default sqlite:<data_dir>/kiln.db',
        }),
        schema: Type.String({
          default: 'public',
          pattern: '^[a-z_][a-z0-9_]{0,62}$',
          allowed: 'a lower-case identifier of letters, digits and _ (at most 63)',
          description: 'PostgreSQL schema that holds Kiln tables',
        }),
        pool_size: Type.Integer({
          default: 10,
          minimum: 1,
          maximum: 200,
          description: 'PostgreSQL connections',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    contexts: Type.Object(
      {
        max_bytes: Type.Integer({
          default: 262144,
          minimum: 1,
          maximum: 16 * 1024 * 1024,
          description: 'largest context content, in UTF-8 bytes',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    streams: Type.Object(
      {
        max_unsent_bytes: Type.Integer({
          default: 16 * 1024 * 1024,
          // Above the largest single event: a response's last one carries its whole output.
          minimum: 1024 * 1024,
          maximum: 1024 * 1024 * 1024,
          description:
            'bytes of a stream its client has not read, beyond what the kernel holds, before its connection is closed',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    jobs: Type.Object(
      {
        workers: Type.Integer({
          // Jobs mostly wait on engines, so slots are cheap; too few would leave replicas idle.
          default: 64,
          minimum: 0,
          maximum: 1024,
          description: 'jobs this process runs at once (0: this process only serves HTTP)',
        }),
        lease_seconds: Type.Integer({
          default: 30,
          minimum: 1,
          maximum: 3600,
          description: 'a running job whose worker stops renewing for this long is requeued',
        }),
        poll_interval_ms: Type.Integer({
          default: 2000,
          minimum: 50,
          maximum: 60000,
          description: 'slow poll when no wake-up arrives',
        }),
        max_attempts: Type.Integer({
          default: 3,
          minimum: 1,
          maximum: 10,
          description: 'runs per job before worker-lost',
        }),
        retention: Duration(
          '7d',
          'how long terminal jobs, their results and files are kept (then 410, and 404 once purged)',
          { timer: false },
        ),
        purge_interval: Duration('30s', 'how often the purge deletes what is past its retention', {
          minMs: 100,
        }),
        sync_timeout: Duration('5m', 'longest `Prefer: wait=N` an async submission is answered after'),
      },
      { default: {}, additionalProperties: false },
    ),
    webhooks: Type.Object(
      {
        retry_schedule: Type.Array(Duration('5s', 'delay before a retry'), {
          default: ['5s', '30s', '2m', '10m', '30m', '1h', '3h', '6h', '12h'],
          minItems: 1,
          maxItems: 20,
          description: 'delays between attempts; after the last, the delivery is failed',
        }),
        timeout: Duration('10s', 'an attempt with no answer by then counts as failed'),
        retention: Duration('7d', 'how long delivered and abandoned deliveries are kept', { timer: false }),
        jitter: Type.Number({
          default: 0.2,
          minimum: 0,
          maximum: 1,
          description: 'random ± share of each delay',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    limits: Type.Object(
      {
        tiers: Type.Object(
          { free: LimitsSchema, standard: LimitsSchema },
          {
            default: {},
            additionalProperties: false,
            description: 'default limits of every key of the tier (a key or its organisation may be tighter)',
          },
        ),
        default_max_tokens: Type.Integer({
          default: 1024,
          minimum: 1,
          maximum: 10_000_000,
          description: 'completion tokens reserved at admission for a request that sets no max_tokens',
        }),
        image_seconds: Type.Number({
          default: 1,
          minimum: 0,
          maximum: 3600,
          description: 'seconds an image counts as against media_seconds_per_day',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    ...FleetSchema,
    files: Type.Object(
      {
        dir: Type.String({
          default: '',
          description: 'where produced files are kept; default <data_dir>/files',
        }),
        url_ttl: Duration('24h', 'how long a signed file URL works', { timer: false }),
        max_input_bytes: Type.Integer({
          default: 20 * 1024 * 1024,
          minimum: 1024,
          description: 'largest image input (decoded data: URI or fetched https:// image)',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    log: Type.Object(
      {
        level: Type.Union(
          ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
          { default: 'info', description: 'pino log level' },
        ),
      },
      { default: {}, additionalProperties: false },
    ),
    security: Type.Object(
      {
        allow_hosts: Type.Array(Type.String({ minLength: 1 }), {
          default: [],
          description:
            'loopback/private hosts or CIDRs outbound calls may reach (webhook receivers on-premise)',
        }),
        dns_servers: Type.Array(Type.String({ pattern: '^[^\\s]+$', allowed: 'an address, ip or ip:port' }), {
          default: [],
          description: 'DNS servers (ip or ip:port) for outbound host names; empty = the system resolver',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    metrics: Type.Object(
      {
        open: Type.Boolean({
          default: false,
          description: 'serve GET /metrics without an API key',
        }),
        port: Type.Integer({
          default: 0,
          minimum: 0,
          maximum: 65535,
          description: 'kiln worker: port of its own GET /metrics listener, on host; 0 = none',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    telemetry: Type.Object(
      {
        otlp_endpoint: Type.String({
          default: '',
          pattern: '^(https?://[^\\s]+)?$',
          allowed: 'an absolute http:// or https:// URL',
          description: 'OTLP/HTTP traces endpoint (…/v1/traces); empty = no tracing',
        }),
        service_name: Type.String({
          default: 'kiln',
          minLength: 1,
          description: 'service.name of the traces this process exports',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

export type Config = Readonly<Static<typeof ConfigSchema>>;
