import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { KilnError, validationError } from '../errors.js';
import type { FileService } from '../files/service.js';
import { parseJobId } from '../jobs/present.js';
import { ListJobsQuery, type UsageQuery } from '../jobs/schemas.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import { limitStandings } from '../limits/usage.js';

/**
 * The last second of year 9999. Times reach the store as BIGINT milliseconds: without a bound,
 * `since=1e309` or `9223372036854775808` overflows PostgreSQL's BIGINT (a 500) where SQLite
 * compares doubles (a 200). Bounded, both stores give the same answer.
 */
export const MAX_UNIX_SECONDS = 253_402_300_799;

const unixSeconds = (description: string) =>
  Type.Integer({ minimum: 0, maximum: MAX_UNIX_SECONDS, description });

/** `UsageQuery` with both times bounded to what the stores can compare. */
const BoundedUsageQuery = Type.Object(
  {
    since: Type.Optional(unixSeconds('Unix seconds, inclusive')),
    until: Type.Optional(unixSeconds('Unix seconds, exclusive')),
  },
  { additionalProperties: false },
);

/** Polling, listing and cancelling jobs of every kind, under /v1 and /api/v1 alike; and the usage ledger. */
export function jobRoutes(
  app: FastifyInstance,
  deps: { jobs: JobService; runtime: { files: FileService } },
): void {
  const { jobs } = deps;
  for (const base of ['/v1/jobs', '/api/v1/jobs']) {
    app.get<{ Params: { id: string } }>(`${base}/:id`, async (request) =>
      jobs.poll(await jobs.get(request.auth.org_id, request.params.id)),
    );

    // A terminal job's request, result and produced files, gone now rather than after retention: its
    // polls answer 410 from then on, its files and their URLs 404. Its usage-ledger row stays.
    app.delete<{ Params: { id: string } }>(`${base}/:id`, async (request) => {
      const job = await jobs.get(request.auth.org_id, request.params.id);
      if (!isTerminal(job.status)) {
        throw new KilnError(
          'conflict',
          `job ${request.params.id} is ${job.status}: cancel it first, then delete it`,
          {
            attach: { job: jobs.poll(job) },
          },
        );
      }
      await deps.runtime.files.deleteForJob(job.org_id, job.id);
      await jobs.store.jobs.forget(job.org_id, job.id);
      // Its webhook is not sent (again) with the result just deleted.
      if (job.webhook_url) await jobs.store.webhooks.dropForJob(job.id);
      return { id: jobs.poll(job).id, object: 'job', deleted: true };
    });

    app.post<{ Params: { id: string } }>(`${base}/:id/cancel`, async (request) =>
      jobs.poll(await jobs.cancel(request.auth.org_id, request.params.id)),
    );

    app.get<{ Querystring: ListJobsQuery }>(
      base,
      { schema: { querystring: ListJobsQuery } },
      async (request) => {
        const { status, kind, limit = 20, after } = request.query;
        // A kind misspelt, or a cursor that is no job id, would look like an empty list: said instead.
        const kinds = jobs.kinds.names();
        const cursor = after ? parseJobId(after)?.id : undefined;
        const problems = [
          ...(kind && !kinds.includes(kind)
            ? [{ field: 'kind', rule: 'enum', message: `kind must be one of ${kinds.join(', ')}` }]
            : []),
          ...(after && cursor === undefined
            ? [
                {
                  field: 'after',
                  rule: 'format',
                  message: 'after must be a job id: the last id of the previous page',
                },
              ]
            : []),
        ];
        if (problems.length > 0) throw validationError(problems);
        const page = await jobs.store.jobs.list(request.auth.org_id, {
          limit,
          now: Date.now(),
          ...(status ? { status } : {}),
          ...(kind ? { kind } : {}),
          ...(cursor ? { after: cursor } : {}),
        });
        const data = page.data.map((job) => jobs.poll(job));
        return { object: 'list', data, has_more: page.has_more, last_id: data.at(-1)?.id ?? null };
      },
    );
  }

  app.get<{ Querystring: UsageQuery }>(
    '/api/v1/usage',
    { schema: { querystring: BoundedUsageQuery } },
    async (request) => {
      const until = request.query.until ?? Math.ceil(Date.now() / 1000);
      const since = request.query.since ?? 0;
      // Both given: a `since` alone a little ahead of this clock is an empty period, not a mistake.
      if (request.query.since !== undefined && request.query.until !== undefined && since > until) {
        throw validationError([
          { field: 'since', rule: 'order', message: `since (${since}) is after until (${until})` },
        ]);
      }
      const data = await jobs.store.usage.summary(request.auth.org_id, since * 1000, until * 1000);
      // Where the caller stands against its limits now, whatever the period asked for.
      const limits = jobs.limiter
        ? await limitStandings(jobs.store, jobs.limiter, request.auth)
        : { key: {}, org: {} };
      return { object: 'usage', since, until, data, limits };
    },
  );
}
