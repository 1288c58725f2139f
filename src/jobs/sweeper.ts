import type { Logger } from 'pino';
import type { JobService } from './service.js';

const ORPHANED =
  'the job was cancelled: the gateway process that ran it and held its stream stopped, and its caller with it';

/** Admissions past every limit's window (a month) are deleted, this many at a time, once an hour. */
const ADMISSIONS_KEPT_MS = 32 * 86_400_000;
const PRUNE_EVERY_MS = 3_600_000;
const PRUNE_BATCH = 1000;

/**
 * Ends what no worker will: jobs past their queue TTL (`timeout`), and jobs whose worker died —
 * requeued while attempts remain, else `failed` with `worker-lost`; a stream that died with the
 * process holding its request is `cancelled` instead. Every process with workers runs one; the
 * guarded statements make concurrent sweepers harmless.
 */
export class Sweeper {
  #timer: NodeJS.Timeout | undefined;
  #busy = false;
  #prunedAt = 0;

  constructor(
    private readonly jobs: JobService,
    private readonly intervalMs: number,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.#timer = setInterval(() => void this.sweep(), this.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async sweep(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      const now = Date.now();
      // A stream whose request died with the process that ran it: nobody is left to stream to.
      for (const { id, org_id } of await this.jobs.store.jobs.orphanedStreams(now, 500)) {
        const ended = await this.jobs.finish(
          id,
          { by: 'orphaned', now },
          {
            status: 'cancelled',
            error: { code: 'cancelled', message: ORPHANED },
            stoppedRunning: true,
          },
        );
        // As for a caller gone: a retry with its Idempotency-Key runs the request again.
        if (ended) await this.jobs.store.idempotency.release(org_id, id);
      }
      const requeued = await this.jobs.store.jobs.requeueLost(now);
      if (requeued > 0) {
        this.log.warn({ requeued }, 'requeued jobs whose worker stopped renewing its lease');
        await this.jobs.store.driver.notify('kiln_jobs', 'requeued');
      }
      for (const { id, why } of await this.jobs.store.jobs.overdue(now, 500)) {
        await this.jobs.finish(
          id,
          { by: why, now },
          why === 'queue-ttl'
            ? {
                status: 'timeout',
                error: { code: 'queue-timeout', message: 'no worker took the job within its queue TTL' },
              }
            : {
                status: 'failed',
                error: {
                  code: 'worker-lost',
                  message: 'the workers running this job stopped responding on every attempt',
                },
              },
        );
      }
      if (now - this.#prunedAt >= PRUNE_EVERY_MS) {
        this.#prunedAt = now;
        while (
          (await this.jobs.store.admissions.prune(now - ADMISSIONS_KEPT_MS, PRUNE_BATCH)) === PRUNE_BATCH
        );
      }
    } catch (error) {
      this.log.error({ err: error }, 'sweeping jobs failed; will retry');
    } finally {
      this.#busy = false;
    }
  }
}
