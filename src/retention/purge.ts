import { setImmediate } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { FileService } from '../files/service.js';
import type { Store } from '../store/index.js';

/**
 * Rows one step of the purge deletes at most: short transactions, whatever the backlog. On SQLite a
 * step holds the event loop, and every stream it relays, while it frees the rows' pages: with 100 KB
 * requests and results, 200 jobs took 12–17 ms a step; 32 take 1.6–3.4 ms (0.1–1.0 ms small ones).
 */
export const PURGE_STEP = 32;
/** Idempotency keys answer replays for a day (DESIGN.md); after that they are only weight. */
export const IDEMPOTENCY_KEPT_MS = 86_400_000;
/** How often the files directory is swept for orphans: at a process's first pass, then daily. */
export const ORPHAN_SWEEP_EVERY_MS = 86_400_000;
/** Jobs looked at a step when the first pass dates expiries: only those dated otherwise are written. */
const REDATE_STEP = 256;
/** `<jobs.retention ms>@<Unix ms>`: the retention the last dating pass used, and when it began. */
const DATED_SETTING = 'jobs.retention_dated';
/**
 * Longer than any job waits and runs (queue TTL and run limit: two hours at most): a job that ended
 * after a pass began was created less than this before it.
 */
const LONGEST_JOB_MS = 86_400_000;

/** The smallest job id (UUIDv7) of a job created at `ms` or later. */
const firstIdAt = (ms: number) => {
  const hex = Math.max(0, ms).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8)}-0000-0000-000000000000`;
};
/**
 * The youngest a stored file with no row may be and still be swept: a file is written before its
 * row, so with a tiny `jobs.retention` the sweep must not race a save in progress.
 */
const ORPHAN_MIN_AGE_MS = 3_600_000;

export interface PurgeSettings {
  intervalMs: number;
  /** Delivered and abandoned webhook deliveries are kept this long. */
  deliveriesKeptMs: number;
  /** `jobs.retention`: a stored file with no row is deleted once it is this old. */
  jobsKeptMs: number;
}

export interface Purged {
  jobs: number;
  files: number;
  idempotencyKeys: number;
  deliveries: number;
  /** Stored files no row named, older than `jobs.retention` (a sweep runs daily). */
  orphans: number;
  /** Terminal jobs whose expiry the first pass dated by this `jobs.retention`. */
  redated: number;
}

/**
 * Keeps the store and the files directory in check: jobs past `jobs.retention` go with their
 * produced files, request, result, events and idempotency record (their usage-ledger rows stay);
 * idempotency records after a day; finished webhook deliveries after `webhooks.retention`; and,
 * daily, stored files that no row names once they are older than `jobs.retention` (by then a file
 * with a row would have gone with its job too). Every process with workers runs one; two purging
 * at once delete each row once.
 */
export class Purger {
  #timer: NodeJS.Timeout | undefined;
  #sweptAt = Number.NEGATIVE_INFINITY;
  #redated = false;
  #running: Promise<unknown> | undefined;

  constructor(
    private readonly store: Store,
    private readonly files: FileService,
    private readonly settings: PurgeSettings,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.#timer = setInterval(() => {
      if (this.#running) return;
      this.#running = this.purge()
        .catch((error) => this.log.error({ err: error }, 'purging failed; will retry'))
        .finally(() => {
          this.#running = undefined;
        });
    }, this.settings.intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
  }

  /**
   * One full pass: batches until nothing is left that is past its retention. The first pass of a
   * process dates terminal jobs' expiry by its `jobs.retention` first: a changed retention holds
   * for the jobs that ended before it, sooner or later.
   */
  async purge(now = Date.now()): Promise<Purged> {
    const purged: Purged = { jobs: 0, files: 0, idempotencyKeys: 0, deliveries: 0, orphans: 0, redated: 0 };
    if (!this.#redated) {
      purged.redated = await this.#redate();
      this.#redated = true;
    }
    for (;;) {
      const jobs = await this.store.retention.expired(now, PURGE_STEP);
      // Files first: should the process stop between the two, the next pass finds the job again.
      for (const job of jobs) purged.files += await this.files.deleteForJob(job.org_id, job.id);
      const deleted = await this.store.transaction((tx) =>
        tx.retention.deleteJobs(jobs.map((job) => job.id)),
      );
      purged.jobs += deleted;
      if (jobs.length < PURGE_STEP || deleted === 0) break;
    }
    const prune = async (step: () => Promise<number>) => {
      let total = 0;
      for (let n = PURGE_STEP; n === PURGE_STEP; total += n) n = await step();
      return total;
    };
    purged.idempotencyKeys = await prune(() =>
      this.store.retention.pruneIdempotency(now - IDEMPOTENCY_KEPT_MS, PURGE_STEP),
    );
    purged.deliveries = await prune(() =>
      this.store.retention.pruneDeliveries(now - this.settings.deliveriesKeptMs, PURGE_STEP),
    );
    if (now - this.#sweptAt >= ORPHAN_SWEEP_EVERY_MS) {
      this.#sweptAt = now;
      purged.orphans = await this.files.deleteOrphans(
        now - Math.max(this.settings.jobsKeptMs, ORPHAN_MIN_AGE_MS),
      );
    }
    if (Object.values(purged).some((n) => n > 0)) {
      this.log.info(purged, 'purged what was past its retention');
    }
    return purged;
  }

  /**
   * Dates terminal jobs' expiry by this process's `jobs.retention`, writing only those dated
   * otherwise: every job when the last pass used another value (or none ran), else only the jobs
   * created since a day before that pass began. Restarted one by one, processes still on an old
   * value go on dating the jobs they end by it; the next start with the new value dates those.
   * Steps of 256 jobs, each let go of the event loop (SQLite's run synchronously). Answers how
   * many jobs changed.
   */
  async #redate(): Promise<number> {
    const retention = this.settings.jobsKeptMs;
    const began = Date.now();
    const [value, at] = ((await this.store.settings.get(DATED_SETTING)) ?? '').split('@');
    const since = Number(value) === retention && at ? firstIdAt(Number(at) - LONGEST_JOB_MS) : '';
    let changed = 0;
    for (let after: string | undefined = since; after !== undefined; ) {
      const step = await this.store.retention.redate(retention, after, REDATE_STEP);
      changed += step.changed;
      after = step.last;
      await setImmediate();
    }
    await this.store.settings.set(DATED_SETTING, `${retention}@${began}`);
    return changed;
  }
}
