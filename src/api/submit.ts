import type { FastifyReply, FastifyRequest } from 'fastify';
import { isContextLengthError } from '../engines/openai/discovery.js';
import { type ErrorCode, errorCatalogue, KilnError, validationError } from '../errors.js';
import { randomBase62 } from '../ids.js';
import type { JobKind } from '../jobs/kinds.js';
import { submissionBody } from '../jobs/present.js';
import type { Webhook } from '../jobs/schemas.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import { rateHeaders } from '../limits/refusal.js';
import type { OutboundPolicy } from '../net/policy.js';
import type { JobMode, JobRow } from '../store/types.js';
import { whenClientGoes } from './gone.js';

export interface SubmitDeps {
  jobs: JobService;
  policy: OutboundPolicy;
  /** The longest `Prefer: wait=N` honoured on an async submission (`jobs.sync_timeout`). */
  syncTimeoutMs: number;
}

export interface SubmitOptions {
  kind: JobKind;
  mode: Exclude<JobMode, 'stream'>;
  request: unknown;
  /** The body as sent, where `request` adds Kiln's own choices: what an Idempotency-Key binds. */
  sent?: unknown;
  webhook?: Webhook | undefined;
  /** Headers for a sync answer, from the finished job (the chat route). */
  headers?: (job: JobRow) => Record<string, string>;
  /** The answer to an accepted async submission, in place of the 202 job body (a background response). */
  accepted?: (job: JobRow) => { status: number; body: unknown };
}

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * A chat or response job's request without what the store and the configuration said at submission
 * (the size of its contexts, the persona's output limit): a retry with the same Idempotency-Key and
 * body is the same request, whatever was edited or reloaded in between.
 */
export const boundRequest = <R extends { preambleChars?: number; personaMaxTokens?: number }>({
  preambleChars: _chars,
  personaMaxTokens: _max,
  ...request
}: R) => request;

/** 409 for a retry whose original (`what`: request, stream) still runs; its polling URL beside it. */
export function stillRunning(kind: JobKind, job: JobRow, what: string): KilnError {
  return new KilnError(
    'idempotency-key-in-progress',
    `the original ${what} with this Idempotency-Key is still running`,
    { attach: { polling_url: `${kind.pollingBase}${job.id}` } },
  );
}

export function idempotencyKeyOf(request: FastifyRequest): string | undefined {
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

/**
 * The seconds of RFC 7240's `Prefer: wait=N` (Replicate's convention for "wait up to N seconds,
 * then give me a job"); undefined when the header does not ask.
 */
export function preferWait(request: FastifyRequest): number | undefined {
  const header = request.headers.prefer;
  const text = Array.isArray(header) ? header.join(',') : header;
  const match = /(?:^|[,;\s])wait\s*=\s*"?(\d{1,6})"?/i.exec(text ?? '');
  return match ? Number(match[1]) : undefined;
}

/** The output limit the caller set in a chat's or a response's body; undefined if it set none. */
function outputLimitField(job: JobRow): string | undefined {
  const request = JSON.parse(job.request) as {
    body?: Record<string, unknown>;
    echo?: { max_output_tokens?: unknown };
  };
  if (job.kind === 'response')
    return request.echo?.max_output_tokens != null ? 'max_output_tokens' : undefined;
  // Engines that take both obey max_completion_tokens.
  return ['max_completion_tokens', 'max_tokens'].find((key) => request.body?.[key] != null);
}

/** A terminal job that did not complete, as the HTTP error a sync caller gets. */
export function jobError(job: JobRow, poll: Record<string, unknown>): KilnError {
  const code = (
    job.error_code && job.error_code in errorCatalogue ? job.error_code : 'inference-failed'
  ) as ErrorCode;
  const message = job.error_message ?? `the job ended ${job.status}`;
  // An engine's refusal carries its own fields, so the caller can see what it objected to.
  const engine = poll.engine_error as Record<string, unknown> | undefined;
  // Where the engine named no field: the prompt when it was too long for the context (a chat's
  // `messages`, as OpenAI names it then; a response's `input`); the caller's output limit when that
  // was past the window (vLLM: "'max_tokens' or 'max_completion_tokens' is too large"), unless a
  // persona's default set it; else the body, which is no field.
  const overContext = isContextLengthError(`${message} ${String(engine?.type ?? '')}`);
  const limit = overContext && /max_(?:completion_)?tokens/.test(message);
  const field = !engine
    ? undefined
    : typeof engine.param === 'string'
      ? engine.param
      : limit
        ? outputLimitField(job)
        : overContext
          ? job.kind === 'response'
            ? 'input'
            : 'messages'
          : undefined;
  const details = engine
    ? [
        {
          field: field ?? 'body',
          rule: typeof engine.type === 'string' ? engine.type : 'engine',
          message,
          engine,
        },
      ]
    : undefined;
  // A kind's own failure may name the field at fault (`invalid-image-url`); a refusal of no field
  // (a limit past the engine's window) has none.
  const param =
    typeof poll.param === 'string' ? { param: poll.param } : engine ? { param: field ?? null } : {};
  return new KilnError(code, message, { attach: { job: poll }, ...(details ? { details } : {}), ...param });
}

/**
 * A webhook's address is checked before any job exists; without a secret of its own, the delivery
 * is signed with the organisation's, made now if it has none.
 */
export async function checkWebhook(
  deps: Pick<SubmitDeps, 'jobs' | 'policy'>,
  orgId: string,
  webhook: Webhook | undefined,
): Promise<void> {
  if (!webhook) return;
  await deps.policy.checkUrl(webhook.url, 'webhook.url');
  if (!webhook.secret) {
    await deps.jobs.store.orgs.setWebhookSecret(orgId, `whsec_${randomBase62(32)}`, true);
  }
}

/**
 * The one submission path of every generation endpoint: checks the webhook address, honours
 * Idempotency-Key, records the job, then answers by mode — `async` 202 at once (or, with
 * `Prefer: wait=N`, 200 and the job's poll body if it ends within N seconds), `sync` when the job is terminal:
 * its result or its error, never a 202, however long that takes within the kind's limits. A sync
 * caller that goes away cancels its job.
 */
export async function submitJob(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: SubmitDeps,
  options: SubmitOptions,
) {
  const idempotencyKey = idempotencyKeyOf(request);
  const orgId = request.auth.org_id;
  await checkWebhook(deps, orgId, options.webhook);
  const { job, replayed, windows } = await deps.jobs.submit({
    kind: options.kind,
    mode: options.mode,
    caller: request.auth,
    request: options.request,
    sent: options.sent,
    webhook: options.webhook,
    idempotencyKey,
  });
  if (replayed) reply.header('idempotent-replayed', 'true');
  if (windows) reply.headers(rateHeaders(windows));
  request.log.info({ job_id: job.id, kind: job.kind, mode: job.mode, replayed }, 'job submitted');

  /**
   * An async submission's answer: the job as it stands, `row` once a `Prefer: wait` is over. A
   * replay without `Prefer: wait` of a job since ended answers as the first submission did, 202.
   */
  const accepted = (row: JobRow = job, waited = false) => {
    if (options.accepted) {
      const answer = options.accepted(row);
      return reply.status(answer.status).send(answer.body);
    }
    // Waited on and over: the job as its poll answers it, whatever its outcome (Replicate's way).
    if (waited && isTerminal(row.status)) return reply.status(200).send(deps.jobs.poll(row));
    // A replay answers as the first submission did: with its request (its seed), not this one's.
    const body = submissionBody(job, options.kind, replayed ? JSON.parse(job.request) : options.request);
    return reply
      .status(202)
      .header('location', body.polling_url)
      .send(row === job ? body : { ...body, status: row.status });
  };
  const wait = options.mode === 'async' ? preferWait(request) : undefined;
  if (options.mode === 'async' && wait === undefined) return accepted();

  if (options.mode === 'sync' && replayed && !isTerminal(job.status)) {
    throw stillRunning(options.kind, job, 'request');
  }
  let waitMs: number;
  let stopWatchingClient: () => void = () => undefined;
  if (wait !== undefined) {
    waitMs = Math.min(wait * 1000, deps.syncTimeoutMs);
    reply.header('preference-applied', `wait=${Math.floor(waitMs / 1000)}`);
  } else {
    // Sync: the job ends by itself within its queue TTL and run limit (the sweeper sees to it).
    waitMs = options.kind.queueTtlMs + options.kind.runLimitMs + 60_000;
    const gone = () => {
      if (!reply.raw.writableFinished && !isTerminal(job.status)) {
        void deps.jobs.abandon(orgId, job.id).catch(() => undefined);
      }
    };
    // A caller that left while the job was being recorded closed before there was a listener.
    stopWatchingClient = whenClientGoes(request, reply, gone);
  }
  const done = await deps.jobs
    .waitForTerminal(job.id, waitMs, undefined, replayed ? undefined : job)
    .finally(stopWatchingClient);
  if (isTerminal(done.status)) reply.headers(options.headers?.(done) ?? {});
  if (wait !== undefined) return accepted(done, true);
  if (!isTerminal(done.status)) return accepted();
  // The result as it was stored: JSON already, sent without another parse and serialisation. A
  // replay's was stored earlier: its files' URLs are signed afresh, as a poll's are.
  if (done.status === 'completed')
    return reply
      .status(200)
      .type('application/json; charset=utf-8')
      .send(replayed ? JSON.stringify(deps.jobs.poll(done).result ?? null) : (done.result ?? 'null'));
  throw jobError(done, deps.jobs.poll(done));
}
