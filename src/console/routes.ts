import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { MAX_UNIX_SECONDS } from '../api/jobs.js';

/** Strings longer than this in a job's request (base64 images, mostly) are shown cut, with their length. */
const SHOWN_CHARS = 200;

/** A request as a person reads it: every long string cut, so a page never carries megabytes of base64. */
export function abridged(value: unknown): unknown {
  if (typeof value === 'string') {
    return value.length > SHOWN_CHARS
      ? `${value.slice(0, SHOWN_CHARS)}… (${value.length} characters)`
      : value;
  }
  if (Array.isArray(value)) return value.map(abridged);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, abridged(v)]));
  }
  return value;
}

const parse = (text: string | null): unknown => {
  if (text === null) return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
};

/** The route a job's run recorded, without the replica's address: engines by name and index only. */
function routeShown(meta: unknown): Record<string, unknown> | null {
  const route = (meta as { route?: unknown } | null)?.route;
  if (!route || typeof route !== 'object') return null;
  const { url: _address, ...shown } = route as Record<string, unknown>;
  return shown;
}

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** Where a webhook goes, without its query string (which may carry a token). */
const webhookTarget = (url: string) => {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return null;
  }
};

const DailyQuery = Type.Object(
  {
    days: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 366, default: 30, description: 'days back from today' }),
    ),
    until: Type.Optional(
      Type.Integer({ minimum: 0, maximum: MAX_UNIX_SECONDS, description: 'Unix seconds' }),
    ),
  },
  { additionalProperties: false },
);

/**
 * What the console reads besides the public API, each scoped to the caller's organisation: who
 * the key is, a job with its request, route and webhook delivery, and usage per day and key.
 */
export function consoleApiRoutes(app: FastifyInstance, deps: AppDeps): void {
  app.get('/api/v1/session', async (request) => ({
    object: 'session',
    key: {
      id: request.auth.id,
      prefix: request.auth.prefix,
      name: request.auth.name,
      role: request.auth.role,
      tier: request.auth.tier,
    },
    org: { id: request.auth.org_id, name: request.auth.org_name },
    contexts_max_bytes: deps.config.contexts.max_bytes,
  }));

  app.get<{ Params: { id: string } }>('/api/v1/jobs/:id/details', async (request) => {
    const job = await deps.jobs.get(request.auth.org_id, request.params.id);
    const delivery = job.webhook_url ? await deps.store.webhooks.forJob(job.id) : undefined;
    return {
      object: 'job.details',
      job: deps.jobs.poll(job),
      mode: job.mode,
      attempts: job.attempts,
      request: abridged(parse(job.request)),
      route: routeShown(parse(job.meta)),
      webhook: job.webhook_url
        ? {
            url: webhookTarget(job.webhook_url),
            delivery: delivery
              ? {
                  status: delivery.status,
                  event: delivery.event,
                  attempts: delivery.attempts,
                  last_status: delivery.last_status,
                  last_error: delivery.last_error,
                  created_at: seconds(delivery.created_at),
                  next_attempt_at: delivery.status === 'pending' ? seconds(delivery.next_attempt_at) : null,
                  delivered_at: seconds(delivery.delivered_at),
                }
              : null,
          }
        : null,
    };
  });

  app.get<{ Querystring: { days?: number; until?: number } }>(
    '/api/v1/usage/daily',
    { schema: { querystring: DailyQuery } },
    async (request) => {
      const until = (request.query.until ?? Math.ceil(Date.now() / 1000)) * 1000;
      const day = 86_400_000;
      // The days up to the one holding until's last millisecond: an `until` at midnight ends the day before.
      const since = (Math.floor((until - 1) / day) - (request.query.days ?? 30) + 1) * day;
      const data = await deps.store.usage.daily(request.auth.org_id, Math.max(0, since), until);
      return { object: 'list', since: seconds(Math.max(0, since)), until: seconds(until), data };
    },
  );
}
