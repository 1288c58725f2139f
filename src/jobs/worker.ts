import { hostname } from 'node:os';
import type { Logger } from 'pino';
import { randomBase62 } from '../ids.js';
import type { JobOutcome, JobRow } from '../store/index.js';
import { contextOf, failSpan, inSpan } from '../telemetry/index.js';
import { JobFailure, type RunContext } from './kinds.js';
import type { JobService, LocalSlot } from './service.js';

/** An engine's words as every store can keep them: PostgreSQL refuses NUL in text. */
const storable = (message: string) => message.replaceAll('\u0000', '\ufffd');

export interface WorkerOptions {
  /** Jobs run at once. */
  concurrency: number;
  leaseMs: number;
  pollIntervalMs: number;
}

/** Why a running handler was told to stop. */
type StopReason = 'cancelled' | 'run-limit' | 'lease-lost' | 'shutdown';

interface Running {
  job: JobRow;
  controller: AbortController;
  done: Promise<void>;
  /** Events the run published to its stream so far. */
  published: () => number;
  /** What the run recorded so far (its route), stored with its end. */
  recorded: Record<string, unknown>;
}

/**
 * Claims jobs under a lease and runs their kind's handler. Wakes on the store's `kiln_jobs`
 * notification and otherwise polls slowly; renews its leases while handlers run; aborts a handler
 * that is cancelled, overruns its kind's run limit, or whose lease was lost.
 */
export class Worker {
  readonly owner = `${hostname()}:${process.pid}:${randomBase62(6)}`;
  readonly #running = new Map<string, Running>();
  #stopping = false;
  /** Set by drain: no more claims from the queue. */
  #draining = false;
  /** False once a claim found nothing, until a notification or the slow poll says otherwise. */
  #queueMayHaveWork = true;
  /** Slots promised to jobs being inserted for this worker. */
  #reserved = 0;
  #wake: () => void = () => undefined;
  #loop: Promise<void> | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #unsubscribe: Array<() => unknown> = [];

  constructor(
    private readonly jobs: JobService,
    private readonly options: WorkerOptions,
    private readonly log: Logger,
  ) {}

  /**
   * The events a stream job running here has published so far (what its caller has been sent, give
   * or take the last few); undefined for a job of another mode, or one not running here.
   */
  published(id: string): number | undefined {
    const running = this.#running.get(id);
    return running?.job.mode === 'stream' ? running.published() : undefined;
  }

  /** What a job running here has recorded so far, when it has recorded anything. */
  recorded(id: string): Record<string, unknown> | undefined {
    const recorded = this.#running.get(id)?.recorded;
    return recorded && Object.keys(recorded).length > 0 ? { ...recorded } : undefined;
  }

  /**
   * A slot for a job that will be inserted already leased to this worker (see JobService.submit),
   * or undefined when every slot is taken.
   */
  reserve(): LocalSlot | undefined {
    if (this.#stopping || this.#running.size + this.#reserved >= this.options.concurrency) return undefined;
    this.#reserved++;
    let used = false;
    const done = () => {
      if (used) return false;
      used = true;
      this.#reserved--;
      return true;
    };
    return {
      owner: this.owner,
      leaseMs: this.options.leaseMs,
      run: (job, request) => {
        if (done()) this.#start(job, request);
      },
      release: () => {
        if (done()) this.#wake();
      },
    };
  }

  async start(): Promise<void> {
    const { store, events } = this.jobs;
    this.#unsubscribe.push(
      await store.driver.listen('kiln_jobs', () => {
        this.#queueMayHaveWork = true;
        this.#wake();
      }),
    );
    this.#unsubscribe.push(
      events.on('*', (event) => {
        if (event.t === 'cancel')
          this.#running.get(event.id)?.controller.abort('cancelled' satisfies StopReason);
      }),
    );
    this.#renewTimer = setInterval(
      () => void this.#renewLeases(),
      Math.max(50, Math.floor(this.options.leaseMs / 3)),
    );
    this.#loop = this.#claimLoop();
  }

  /**
   * Takes no more queued jobs (another process will), then waits until the jobs running here have
   * finished or `deadline` (epoch ms) has passed. Jobs of requests still answered here may start.
   */
  async drain(deadline: number): Promise<void> {
    this.#draining = true;
    this.#wake();
    while (this.#running.size > 0 && Date.now() < deadline) {
      let timer: NodeJS.Timeout | undefined;
      const timeUp = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
      });
      await Promise.race([Promise.all([...this.#running.values()].map((r) => r.done)), timeUp]);
      clearTimeout(timer);
    }
  }

  /** Stops claiming, aborts running handlers and hands their jobs back to the queue at once. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wake();
    clearInterval(this.#renewTimer);
    for (const off of this.#unsubscribe) await off();
    for (const running of this.#running.values()) running.controller.abort('shutdown' satisfies StopReason);
    await this.#loop;
    await Promise.all([...this.#running.values()].map((r) => r.done));
    const released = await this.jobs.store.jobs.release(this.owner, Date.now());
    if (released > 0) {
      this.log.info({ released }, 'handed running jobs back to the queue');
      await this.jobs.store.driver.notify('kiln_jobs', 'released');
    }
  }

  async #claimLoop(): Promise<void> {
    const kinds = this.jobs.kinds.names();
    while (!this.#stopping) {
      const woken = new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      try {
        while (
          this.#queueMayHaveWork &&
          !this.#stopping &&
          !this.#draining &&
          this.#running.size + this.#reserved < this.options.concurrency
        ) {
          const now = Date.now();
          const job = await this.jobs.store.jobs.claimNext(
            this.owner,
            kinds,
            now,
            now + this.options.leaseMs,
          );
          if (!job) {
            this.#queueMayHaveWork = false;
            break;
          }
          this.#start(job);
        }
      } catch (error) {
        this.log.error({ err: error }, 'claiming jobs failed; retrying after the poll interval');
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        woken,
        new Promise((resolve) => {
          timer = setTimeout(() => {
            // The slow poll: work can arrive where no notification reaches (a requeue by a sweeper elsewhere).
            this.#queueMayHaveWork = true;
            resolve(undefined);
          }, this.options.pollIntervalMs);
        }),
      ]);
      clearTimeout(timer);
    }
  }

  /**
   * `request` is set for a job submitted in this process, which holds any request waiting for its
   * output; a claimed job's request comes from the store.
   */
  #start(job: JobRow, request?: unknown): void {
    const controller = new AbortController();
    const running: Running = {
      job,
      controller,
      done: Promise.resolve(),
      published: () => 0,
      recorded: {},
    };
    // A run of this job still here lost its lease (the job went back to the queue): it stops.
    this.#running.get(job.id)?.controller.abort('lease-lost' satisfies StopReason);
    this.#running.set(job.id, running);
    running.done = this.#run(running, request)
      .catch((error: unknown) => {
        // The outcome did not commit: the job stays running under this lease, renewals stop, and the
        // sweeper requeues it once the lease runs out. One job's store error must not end the process.
        this.log.error(
          { err: error, job_id: job.id },
          'recording the job outcome failed; it runs again once its lease expires',
        );
      })
      .finally(() => {
        if (this.#running.get(job.id) === running) this.#running.delete(job.id);
        this.#wake();
      });
  }

  /** One run of the job, as a span in the trace of the request that submitted it. */
  #run(running: Running, localRequest: unknown): Promise<void> {
    const { job, controller } = running;
    const attributes = { 'kiln.job.kind': job.kind, 'kiln.job.id': job.id, 'kiln.job.attempt': job.attempts };
    return inSpan('job', { parent: contextOf(job.traceparent), attributes }, async (span) => {
      const outcome = await this.#runJob(running, localRequest);
      if (!span) return;
      if (outcome) {
        span.setAttribute('kiln.job.status', outcome.status);
        if (outcome.error) failSpan(span, outcome.error.code);
      } else if (controller.signal.reason === ('cancelled' satisfies StopReason)) {
        // Made terminal by the cancel itself: nothing of this run failed.
        span.setAttributes({ 'kiln.job.status': 'cancelled', 'kiln.cancelled': true });
      } else {
        // Lease lost or shut down: the job runs again, here or elsewhere.
        span.setAttribute('kiln.job.status', 'interrupted');
      }
    });
  }

  /** Runs the handler and records its outcome; answers it, or undefined when another party ends the job. */
  async #runJob(running: Running, localRequest: unknown): Promise<JobOutcome | undefined> {
    const { job, controller } = running;
    const kind = this.jobs.kinds.get(job.kind);
    const guard = { by: 'worker', owner: this.owner, attempt: job.attempts } as const;
    if (!kind) {
      const outcome: JobOutcome = {
        status: 'failed',
        error: {
          code: 'inference-failed',
          message: `no handler for job kind ${job.kind} in this deployment`,
        },
      };
      await this.jobs.finish(job.id, guard, outcome);
      return outcome;
    }
    const limit = setTimeout(
      () => controller.abort('run-limit' satisfies StopReason),
      Math.max(0, (job.run_deadline ?? Date.now()) - Date.now()),
    );
    const { recorded } = running;
    // A stream's output and route go only where its request waits: this process, if it submitted the job.
    const events = this.jobs.events;
    // Counted in this closure's own context, which every event reads anyway: no other object a chunk.
    let parts = 0;
    running.published = () => parts;
    const tell = localRequest !== undefined ? events.publishLocal.bind(events) : events.publish.bind(events);
    const context: RunContext<unknown> = {
      publicId: `${kind.idPrefix}${job.id}`,
      id: job.id,
      orgId: job.org_id,
      request: localRequest ?? JSON.parse(job.request),
      attempt: job.attempts,
      mode: job.mode,
      progress: async (fraction) => {
        // A figure that is no number is no progress. Four decimals, so that both stores keep the
        // same figure (PostgreSQL's column is single precision: 1/3 read back 0.33333334).
        if (!Number.isFinite(fraction)) return;
        const progress = Math.round(Math.min(1, Math.max(0, fraction)) * 10_000) / 10_000;
        await this.jobs.store.jobs.setProgress(job.id, this.owner, job.attempts, progress);
        this.jobs.events.publish({ t: 'progress', id: job.id, progress });
      },
      publish: (data) => {
        parts++;
        tell({ t: 'part', id: job.id, data, a: job.attempts });
      },
      record: async (meta) => {
        // Waiting requests hear it now (a stream's headers carry the route); the store gets it with the outcome.
        Object.assign(recorded, meta);
        tell({ t: 'meta', id: job.id, meta });
      },
    };
    // Decide the outcome first and record it once, so a store error while recording is never
    // mistaken for the handler failing.
    let outcome: JobOutcome | undefined;
    let stopped: StopReason | undefined;
    try {
      const { result, usage } = await kind.run(context, controller.signal);
      if (controller.signal.aborted) throw new Error('aborted');
      outcome = { status: 'completed', result, usage };
    } catch (error) {
      const reason = controller.signal.aborted ? (controller.signal.reason as StopReason) : undefined;
      stopped = reason;
      if (reason === 'run-limit') {
        outcome = {
          status: 'timeout',
          error: {
            code: 'run-timeout',
            message: `the job ran longer than the ${kind.runLimitMs} ms its kind allows`,
          },
        };
      } else if (reason === undefined) {
        outcome =
          error instanceof JobFailure
            ? {
                status: 'failed',
                error: { code: error.code, message: storable(error.message), details: error.extra },
              }
            : {
                status: 'failed',
                error: {
                  code: 'inference-failed',
                  message: storable(error instanceof Error ? error.message : String(error)),
                },
              };
      }
      // cancelled: already terminal; lease-lost: another run has it; shutdown: released in stop().
    } finally {
      clearTimeout(limit);
    }
    if (!outcome) {
      // Cancelled from another process, which could not know the route this run took: kept now
      // (also when this process learnt of it from a lease renewal; the guard checks the cancel).
      if ((stopped === 'cancelled' || stopped === 'lease-lost') && Object.keys(recorded).length > 0)
        await this.jobs.store.jobs
          .keepCancelledMeta(job.id, job.attempts, recorded)
          .catch((error: unknown) =>
            this.log.warn({ err: error, job_id: job.id }, 'keeping a cancelled run’s route failed'),
          );
      return undefined;
    }
    await this.jobs.finish(
      job.id,
      guard,
      Object.keys(recorded).length > 0 ? { ...outcome, meta: recorded } : outcome,
      localRequest !== undefined,
      job,
    );
    // A child logger costs a few microseconds: made only for a line that will be written.
    const level = outcome.status === 'completed' ? 'debug' : 'info';
    if (this.log.isLevelEnabled(level)) {
      const log = this.log.child({ job_id: job.id, kind: job.kind, attempt: job.attempts });
      if (level === 'debug') log.debug('job completed');
      else log.info({ status: outcome.status, code: outcome.error?.code }, 'job did not complete');
    }
    return outcome;
  }

  /** Renews every lease in one statement; a job no longer held (cancelled, reclaimed) is aborted. */
  async #renewLeases(): Promise<void> {
    const runs = [...this.#running.values()].map(({ job }) => ({ id: job.id, attempt: job.attempts }));
    if (runs.length === 0) return;
    try {
      const held = await this.jobs.store.jobs.renewLeases(
        this.owner,
        runs,
        Date.now() + this.options.leaseMs,
      );
      for (const { id, attempt } of runs) {
        // Not the run asked about: a later one of the same job, claimed here while this renewal ran.
        const run = this.#running.get(id);
        if (!held.has(id) && run?.job.attempts === attempt)
          run.controller.abort('lease-lost' satisfies StopReason);
      }
    } catch (error) {
      this.log.warn({ err: error }, 'renewing leases failed; will retry');
    }
  }
}
