import { createHash } from 'node:crypto';
import { KilnError, notFound } from '../errors.js';
import { uuidv7 } from '../ids.js';
import type { Limiter } from '../limits/admission.js';
import type { RateWindows } from '../limits/refusal.js';
import { countSubmittedJob, observeFinishedJob } from '../metrics/jobs.js';
import type {
  ApiKey,
  FinishGuard,
  JobMode,
  JobOutcome,
  JobRow,
  JobStatus,
  Repositories,
  Store,
} from '../store/index.js';
import type { NewJob } from '../store/repos/jobs.js';
import { TERMINAL_STATUSES } from '../store/types.js';
import { currentTraceparent } from '../telemetry/index.js';
import { type JobEvent, JobEvents } from './events.js';
import { countedUsage, type JobKind, type KindRegistry } from './kinds.js';
import { parseJobId, pollBody } from './present.js';
import { RunEnds } from './run-ends.js';

export interface JobSettings {
  retentionMs: number;
  maxAttempts: number;
  /** A produced file's signed URL, fresh: a poll body's `url`s are signed as it is answered. */
  signUrl?: (fileId: string) => string;
}

export interface Submission {
  /** The job's UUID, when the caller must know it before the job can start (to listen for partial output). */
  id?: string;
  kind: JobKind;
  mode: JobMode;
  /** Whose work it is: its organisation owns the job, and its limits admit it or not. */
  caller: ApiKey;
  request: unknown;
  /**
   * The body as the client sent it, where `request` adds what Kiln chose for it (a media job's
   * random seed): what an idempotency key binds, so that the same body sent again is the same job.
   */
  sent?: unknown;
  webhook?: { url: string; secret?: string | undefined } | undefined;
  idempotencyKey?: string | undefined;
}

const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/** Why a job was cancelled when its caller went away before the answer (JobService.abandon). */
const ABANDONED = 'the job was cancelled: its caller went away before the answer';

/** Keys sorted at every level, so the same body always hashes the same. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export const isTerminal = (status: JobStatus) => TERMINAL_STATUSES.includes(status);

/** A slot on a worker of this process, reserved before the job exists. */
export interface LocalSlot {
  owner: string;
  leaseMs: number;
  /** Runs the job, inserted already leased to `owner`; `request` is its request, not yet serialised. */
  run(job: JobRow, request: unknown): void;
  /** Gives the slot back unused (the insert failed). */
  release(): void;
}

export interface LocalWorker {
  readonly owner: string;
  reserve(): LocalSlot | undefined;
  /** Events a stream job running here has published so far; undefined for any other job. */
  published(id: string): number | undefined;
  /** What a job running here has recorded so far (its route), which its end would store. */
  recorded(id: string): Record<string, unknown> | undefined;
}

/** Raised inside the submit transaction when a concurrent twin bound the idempotency key first. */
class LostIdempotencyRace extends Error {}

/**
 * The job lifecycle as the API and the workers share it: submit, look up, cancel, and the one path
 * that makes a job terminal (usage row and webhook outbox in the same transaction).
 */
export class JobService {
  readonly events: JobEvents;
  #localWorker: LocalWorker | undefined;
  readonly #runEnds: RunEnds;

  constructor(
    readonly store: Store,
    readonly kinds: KindRegistry,
    readonly settings: JobSettings,
    /** Rate limits and budgets; without it nothing is limited. */
    readonly limiter?: Limiter,
  ) {
    this.events = new JobEvents(store.driver);
    this.#runEnds = new RunEnds(store, settings.retentionMs, (run) =>
      this.#endAlone(
        run.known.id,
        { by: 'worker', owner: run.owner, attempt: run.attempt },
        run.outcome,
        Date.now(),
        run.known,
        true,
      ),
    );
  }

  start(): Promise<void> {
    return this.events.start();
  }

  stop(): Promise<void> {
    return this.events.stop();
  }

  /**
   * Records a new job (committed before this returns) and wakes the workers. With an idempotency key
   * already bound to the same body, answers that job with `replayed` instead. A limited caller's job
   * is admitted in the same transaction, or refused with a 429 before it exists; `windows` are the
   * caller's per-minute limits as they stand after it.
   */
  async submit(
    submission: Submission,
  ): Promise<{ job: JobRow; replayed: boolean; windows?: RateWindows | undefined }> {
    const { kind, caller, idempotencyKey } = submission;
    const orgId = caller.org_id;
    const scopes = this.limiter?.scopes(caller) ?? [];
    const cost =
      scopes.length > 0 && this.limiter
        ? (kind.meter?.reserve(submission.request, this.limiter.settings) ?? { tokens: 0, media_ms: 0 })
        : undefined;
    const requestHash = idempotencyKey
      ? createHash('sha256')
          .update(
            canonical({
              kind: kind.name,
              mode: submission.mode,
              request: submission.sent ?? submission.request,
              webhook: submission.webhook,
            }),
          )
          .digest('hex')
      : '';

    for (let attempt = 0; attempt < 3; attempt++) {
      const now = Date.now();
      const since = now - IDEMPOTENCY_WINDOW_MS;
      if (idempotencyKey) {
        const existing = await this.store.idempotency.find(orgId, idempotencyKey, since);
        if (existing) {
          const job = await this.#replay(orgId, existing, requestHash);
          // Cancelled because its caller went away: the key is free (abandon frees it just after the
          // cancel commits; this retry may come in between), and the request runs again.
          if (job.status !== 'cancelled' || job.error_message !== ABANDONED) return { job, replayed: true };
          await this.store.idempotency.release(orgId, job.id);
          continue;
        }
      }
      const id = submission.id ?? uuidv7(now);
      // A request waiting on its answer runs at once on a free worker of this process: no queue
      // round trip. Its lease is as real as a claimed one, so a crash still hands it back.
      const slot = submission.mode === 'async' ? undefined : this.#localWorker?.reserve();
      const row: NewJob = {
        id,
        org_id: orgId,
        key_id: caller.id,
        kind: kind.name,
        mode: submission.mode,
        request: JSON.stringify(submission.request),
        max_attempts: this.settings.maxAttempts,
        queue_deadline: now + kind.queueTtlMs,
        run_limit_ms: kind.runLimitMs,
        created_at: now,
        webhook_url: submission.webhook?.url ?? null,
        webhook_secret: submission.webhook?.secret ?? null,
        ...(slot ? { lease: { owner: slot.owner, until: now + slot.leaseMs } } : {}),
        metered: cost !== undefined,
        // The submitting request's span: the job's run joins its trace, in whichever process it runs.
        traceparent: currentTraceparent(),
        held_by: submission.mode === 'stream' ? (this.#localWorker?.owner ?? null) : null,
      };
      try {
        const { job, windows, refused } = await this.store.transaction(
          async (tx) => {
            let windows: RateWindows | undefined;
            if (cost && this.limiter) {
              const verdict = await this.limiter.admit(tx, caller, scopes, cost, id, now);
              // Refused: nothing written, so the transaction commits empty (a throw would roll back
              // a whole commit group).
              if (!verdict.admitted) return { refused: verdict.error };
              windows = verdict.windows;
            }
            const inserted = await tx.jobs.insert(row);
            if (
              idempotencyKey &&
              !(await tx.idempotency.bind(orgId, idempotencyKey, requestHash, id, now, since))
            ) {
              throw new LostIdempotencyRace();
            }
            return { job: inserted, windows };
          },
          // Admissions lock their caller: such a transaction commits on its own (see SqlDriver).
          // Without admission or idempotency key, the insert is the only statement.
          { alone: cost !== undefined, oneStatement: cost === undefined && !idempotencyKey },
        );
        // Refused: the slot goes back below, with any other failure's.
        if (refused || !job) throw refused;
        countSubmittedJob(kind.name, submission.mode);
        if (slot) slot.run(job, submission.request);
        else await this.store.driver.notify('kiln_jobs', kind.name);
        return { job, replayed: false, windows };
      } catch (error) {
        slot?.release();
        if (!(error instanceof LostIdempotencyRace)) throw error;
      }
    }
    throw new KilnError(
      'idempotency-key-in-progress',
      'another request with this Idempotency-Key is being handled; retry shortly',
    );
  }

  /** What a finished job counts against its caller's limits, by its kind's meter. */
  #used(job: JobRow, outcome: JobOutcome): { tokens: number; media_ms: number } {
    const meter = this.kinds.get(job.kind)?.meter;
    return meter && this.limiter
      ? meter.used(outcome.usage, this.limiter.settings)
      : { tokens: 0, media_ms: 0 };
  }

  /**
   * What a stream stopped while it ran counts, from the events it relayed (`Meter.relayed`);
   * undefined, for its reservation to stand, when they were not counted or its kind cannot say.
   */
  #relayed(job: JobRow, relayed: number | undefined): { tokens: number; media_ms: number } | undefined {
    const meter = this.kinds.get(job.kind)?.meter;
    if (relayed === undefined || !meter?.relayed || !this.limiter) return undefined;
    return meter.relayed(JSON.parse(job.request), relayed, this.limiter.settings);
  }

  /** The worker of this process that takes sync and stream jobs directly, when it has room. */
  attachLocalWorker(worker: LocalWorker | undefined): void {
    this.#localWorker = worker;
  }

  async #replay(
    orgId: string,
    existing: { request_hash: string; job_id: string },
    requestHash: string,
  ): Promise<JobRow> {
    if (existing.request_hash !== requestHash) {
      throw new KilnError(
        'idempotency-key-reused',
        'this Idempotency-Key was used with a different request body in the last 24 hours; use a new key for a new request',
        { param: 'Idempotency-Key' },
      );
    }
    const job = await this.store.jobs.get(orgId, existing.job_id);
    // Its result deleted (or past retention), its job maybe purged since: there is nothing left to
    // answer the replay with, and the request is not run again.
    if (!job || (job.expires_at !== null && job.expires_at <= Date.now())) {
      throw new KilnError(
        'job-expired',
        'the request this Idempotency-Key was used for has been deleted or has expired; use a new key for a new request',
        { param: 'Idempotency-Key' },
      );
    }
    return job;
  }

  /**
   * The caller's job by public or bare id: 404 for unknown or another organisation's, 410 once
   * expired or deleted, also after the purge has removed its row (its usage-ledger row remains).
   */
  async get(orgId: string, publicId: string): Promise<JobRow> {
    const parsed = parseJobId(publicId);
    if (!parsed) throw notFound('job', publicId);
    const job = await this.store.jobs.get(orgId, parsed.id);
    const kind = job?.kind ?? (await this.store.usage.kindOfJob(orgId, parsed.id));
    if (
      kind === undefined ||
      (parsed.prefix !== undefined && parsed.prefix !== this.kinds.prefixOf({ kind }))
    ) {
      throw notFound('job', publicId);
    }
    if (!job || (job.expires_at !== null && job.expires_at <= Date.now())) {
      throw new KilnError(
        'job-expired',
        `job ${publicId} is gone: it was deleted, or it finished more than the retention period ago`,
      );
    }
    return job;
  }

  poll(job: JobRow): Record<string, unknown> {
    return pollBody(job, this.kinds, this.settings.signUrl);
  }

  /** Cancels a queued or running job; a terminal one is 409 `job-already-terminal`. */
  async cancel(
    orgId: string,
    publicId: string,
    why = 'the job was cancelled at the caller\u2019s request',
  ): Promise<JobRow> {
    const job = await this.get(orgId, publicId);
    const running = job.status === 'running';
    const relayed = running ? this.#localWorker?.published(job.id) : undefined;
    // Its run's end will find the job over and store nothing: what it recorded goes with the cancel.
    const meta = running ? this.#localWorker?.recorded(job.id) : undefined;
    const cancelled = await this.finish(
      job.id,
      { by: 'cancel', orgId },
      // Running as the cancel found it (a job handed back to the queue has started before, and
      // holds nothing of its earlier run): its budget counts what it relayed, if known here, or
      // keeps the reservation (#end).
      {
        status: 'cancelled',
        error: { code: 'cancelled', message: why },
        stoppedRunning: running,
        ...(relayed === undefined ? {} : { relayed }),
        ...(meta ? { meta } : {}),
      },
    );
    if (cancelled) {
      // Started, whatever the read above saw: a worker may have claimed it in between.
      if (cancelled.started_at !== null) this.events.publish({ t: 'cancel', id: job.id });
      return cancelled;
    }
    const now = (await this.store.jobs.byId(job.id)) as JobRow;
    throw new KilnError('job-already-terminal', `job ${publicId} is already ${now.status}`, {
      attach: { job: this.poll(now) },
    });
  }

  /**
   * Cancels the job of a sync request or a stream whose caller went away before its answer, and
   * frees the Idempotency-Key it came with: the caller saw no answer, so a retry with that key runs
   * the request again rather than being told it was cancelled. A job that ended first keeps its
   * key, and a retry gets its answer.
   */
  async abandon(orgId: string, id: string, why = ABANDONED): Promise<void> {
    try {
      await this.cancel(orgId, id, why);
    } catch {
      return;
    }
    await this.store.idempotency.release(orgId, id);
  }

  /**
   * The one way a job becomes terminal. `guard` decides who may (the lease holder, a cancel, the
   * sweeper); the usage row and the webhook delivery commit with the transition or not at all.
   */
  async finish(
    id: string,
    guard: FinishGuard,
    reported: JobOutcome,
    /** Everyone waiting on the job is in this process (a sync or stream job run where it was submitted). */
    waitersHere = false,
    /**
     * The job as its runner holds it: whether its end also settles admissions or queues a webhook,
     * and the row the terminal one is built from (no read back).
     */
    known?: JobRow,
  ): Promise<JobRow | undefined> {
    const now = Date.now();
    const usage = countedUsage(reported.usage);
    const outcome = usage === reported.usage ? reported : { ...reported, usage };
    // On PostgreSQL a job's end and its usage row are one statement; admissions and webhooks add more.
    const oneStatement =
      known !== undefined && !known.metered && !known.webhook_url && this.store.dialect === 'postgres';
    // A worker's runs that end together end in one statement there.
    const job =
      oneStatement && guard.by === 'worker'
        ? await this.#runEnds.end({ known, owner: guard.owner, attempt: guard.attempt, outcome })
        : await this.#endAlone(id, guard, outcome, now, known, oneStatement);
    if (job) {
      observeFinishedJob(job);
      if (waitersHere) this.events.publishLocal({ t: 'done', id, job });
      else this.events.publish({ t: 'done', id, job });
      if (job.webhook_url) await this.store.driver.notify('kiln_webhooks', id);
    }
    return job;
  }

  /** The job's end in a transaction of its own (in a commit group), not batched with others. */
  #endAlone(
    id: string,
    guard: FinishGuard,
    outcome: JobOutcome,
    now: number,
    known: JobRow | undefined,
    oneStatement: boolean,
  ): Promise<JobRow | undefined> {
    return this.store.transaction((tx) => this.#end(tx, id, guard, outcome, now, known), { oneStatement });
  }

  /** The job's end, in transaction `tx`: its row, usage, settled admission and webhook. */
  async #end(
    tx: Repositories,
    id: string,
    guard: FinishGuard,
    outcome: JobOutcome,
    now: number,
    known: JobRow | undefined,
  ): Promise<JobRow | undefined> {
    const row = await tx.jobs.finish(id, guard, outcome, now, this.settings.retentionMs, known);
    if (!row) return undefined;
    // The reservation gives way to what the job really used, in the same commit: nothing leaks.
    // A job its caller stopped while it ran (a cancel, a client gone) has no usage from its engine,
    // though it may have generated most of its answer: it counts what its stream relayed, when the
    // process that ran it counted that, else its reservation stands; either way a budget cannot be
    // outrun by walking away from every stream before its end. (A timeout is not the caller's doing.)
    const stopped = outcome.usage === undefined && outcome.stoppedRunning === true;
    if (row.metered) {
      if (!stopped) await tx.admissions.settle(row.id, this.#used(row, outcome));
      else await tx.admissions.settle(row.id, this.#relayed(row, outcome.relayed), { atMostReserved: true });
    }
    if (row.webhook_url) {
      await tx.webhooks.enqueue({
        jobId: row.id,
        orgId: row.org_id,
        url: row.webhook_url,
        event: `job.${row.status}`,
        body: JSON.stringify(this.poll(row)),
        now,
      });
    }
    return row;
  }

  /**
   * How often a waiter re-reads a job in case a notification was lost: every second while another
   * process may finish it, rarely when it runs in this process (its end is an event here, which
   * cannot be lost) or when no other process shares the store.
   */
  rereadMs(job: JobRow | undefined): number {
    const runsHere = job?.lease_owner != null && job.lease_owner === this.#localWorker?.owner;
    return this.store.driver.dialect.sharedAcrossProcesses && !runsHere ? 1000 : 10_000;
  }

  /**
   * Waits until the job is terminal or `timeoutMs` passes; answers the row either way, and 410
   * `job-expired` should the job be deleted meanwhile. Listens before it looks, so a finish in
   * between is never missed, and re-reads now and then (`rereadMs`).
   */
  async waitForTerminal(
    id: string,
    timeoutMs: number,
    onEvent?: (event: JobEvent) => void,
    /** The row as the caller last saw it (just inserted), to spare the first read. */
    known?: JobRow,
  ): Promise<JobRow> {
    const deadline = Date.now() + timeoutMs;
    const rereadMs = this.rereadMs(known);
    let wake: () => void = () => undefined;
    let finished: JobRow | undefined;
    const off = this.events.on(id, (event) => {
      onEvent?.(event);
      if (event.t === 'done') {
        finished = event.job;
        wake();
      }
    });
    try {
      for (;;) {
        const woken = new Promise<void>((resolve) => {
          wake = resolve;
        });
        // A finish in this process hands over the row. From elsewhere, read the status, and the
        // whole row (its request may be a long prompt) only once there is an answer to give.
        const job = finished ?? known;
        known = undefined;
        let left = deadline - Date.now();
        if (job) {
          if (isTerminal(job.status) || left <= 0) return job;
        } else {
          const status = await this.store.jobs.statusOf(id);
          left = deadline - Date.now();
          if (status === undefined || isTerminal(status) || left <= 0) {
            const row = await this.store.jobs.byId(id);
            // Deleted while waited for: the purge took it (a replayed request's job, expired meanwhile).
            if (!row)
              throw new KilnError('job-expired', `job ${id} is gone: it was deleted while waited for`);
            return row;
          }
        }
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          woken,
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, Math.min(left, rereadMs));
          }),
        ]);
        clearTimeout(timer);
      }
    } finally {
      off();
    }
  }
}
