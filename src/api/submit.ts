import type { FastifyReply, FastifyRequest } from 'fastify';
import { type ErrorCode, errorCatalogue, KilnError, validationError } from '../errors.js';
import { randomBase62 } from '../ids.js';
import type { JobKind } from '../jobs/kinds.js';
import { submissionBody } from '../jobs/present.js';
import type { Webhook } from '../jobs/schemas.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import type { OutboundPolicy } from '../net/policy.js';
import type { JobMode, JobRow } from '../store/types.js';

export interface SubmitDeps {
  jobs: JobService;
  policy: OutboundPolicy;
  syncTimeoutMs: number;
}

export interface SubmitOptions {
  kind: JobKind;
  mode: Exclude<JobMode, 'stream'>;
  request: unknown;
  webhook?: Webhook | undefined;
  /** Headers for a sync answer, from the finished job (the chat route). */
  headers?: (job: JobRow) => Record<string, string>;
}

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

function idempotencyKeyOf(request: FastifyRequest): string | undefined {
  const header = request.headers['idempotency-key'];
  if (header === undefined) return undefined;
  if (typeof header !== 'string' || !IDEMPOTENCY_KEY.test(header)) {
    throw validationError([
      {
        field: 'Idempotency-Key',
        rule: 'format',
        message: 'Idempotency-Key must be 1–255 printable ASCII characters without spaces',
      },
    ]);
  }
  return header;
}

/** A terminal job that did not complete, as the HTTP error a sync caller gets. */
export function jobError(job: JobRow, poll: Record<string, unknown>): KilnError {
  const code = (
    job.error_code && job.error_code in errorCatalogue ? job.error_code : 'inference-failed'
  ) as ErrorCode;
  return new KilnError(code, job.error_message ?? `the job ended ${job.status}`, { attach: { job: poll } });
}

/**
 * The one submission path of every generation endpoint: checks the webhook address, honours
 * Idempotency-Key, records the job, then answers by mode — `async` 202 at once, `sync` when the job
 * is terminal (or 202 with where to poll if it outlasts `jobs.sync_timeout`).
 */
export async function submitJob(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: SubmitDeps,
  options: SubmitOptions,
) {
  const idempotencyKey = idempotencyKeyOf(request);
  const orgId = request.auth.org_id;
  if (options.webhook) {
    await deps.policy.checkUrl(options.webhook.url, 'webhook.url');
    if (!options.webhook.secret) {
      await deps.jobs.store.orgs.setWebhookSecret(orgId, `whsec_${randomBase62(32)}`, true);
    }
  }
  const { job, replayed } = await deps.jobs.submit({
    kind: options.kind,
    mode: options.mode,
    orgId,
    keyId: request.auth.id,
    request: options.request,
    webhook: options.webhook,
    idempotencyKey,
  });
  if (replayed) reply.header('idempotent-replayed', 'true');
  request.log.info({ job_id: job.id, kind: job.kind, mode: job.mode, replayed }, 'job submitted');

  const accepted = (extra: Record<string, unknown> = {}) => {
    const body = { ...submissionBody(job, options.kind, options.request), ...extra };
    return reply.status(202).header('location', body.polling_url).send(body);
  };
  if (options.mode === 'async') return accepted();

  if (replayed && !isTerminal(job.status)) {
    throw new KilnError(
      'idempotency-key-in-progress',
      'the original request with this Idempotency-Key is still running',
      {
        attach: { polling_url: `${options.kind.pollingBase}${job.id}` },
      },
    );
  }
  const done = await deps.jobs.waitForTerminal(
    job.id,
    deps.syncTimeoutMs,
    undefined,
    replayed ? undefined : job,
  );
  if (!isTerminal(done.status)) {
    return accepted({
      status: done.status,
      message:
        'the job is taking longer than a synchronous request waits; it goes on, poll polling_url for the result',
    });
  }
  reply.headers(options.headers?.(done) ?? {});
  if (done.status === 'completed') return reply.status(200).send(JSON.parse(done.result ?? 'null'));
  throw jobError(done, deps.jobs.poll(done));
}
