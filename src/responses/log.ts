import type { PublishedEvent, Store } from '../store/index.js';

export interface ResponseLogOptions {
  /** How long an event waits for others to share its INSERT. */
  flushMs: number;
  /** Events that make an INSERT at once, without waiting. */
  maxEvents: number;
}

const DEFAULTS: ResponseLogOptions = { flushMs: 50, maxEvents: 64 };

/**
 * A background streaming response's events on their way to the store's event log, many to an
 * INSERT: never one per token. Writes go one after the other, and a write that fails is tried again
 * with the next, so the log is the stream's events from 0 with at most a gap that is being filled.
 *
 * The log is the current run's: the first write of a run (or `close`, for a run that wrote none)
 * deletes what an earlier run of the job left. A client that resumed during the earlier run sees that
 * run's events up to where it was, then this run's after it.
 */
export class ResponseLog {
  readonly #options: ResponseLogOptions;
  #pending: PublishedEvent[] = [];
  #timer: NodeJS.Timeout | undefined;
  #writing: Promise<void> = Promise.resolve();
  #cleared = false;
  #failure: unknown;

  constructor(
    private readonly store: Store,
    private readonly jobId: string,
    /** The run's attempt: only the run holding the job appends (see ResponseEventRepository.append). */
    private readonly attempt: number,
    options: Partial<ResponseLogOptions> = {},
  ) {
    this.#options = { ...DEFAULTS, ...options };
  }

  add(seq: number, data: string): void {
    this.#pending.push({ seq, data, at: Date.now() });
    if (this.#pending.length >= this.#options.maxEvents) this.#flush();
    else this.#timer ??= setTimeout(() => this.#flush(), this.#options.flushMs);
  }

  /**
   * Writes every event still waiting, and answers once they are in the store; throws when the store
   * would not take them. Call it before the run ends, so the log is whole before the job is terminal.
   */
  async close(): Promise<void> {
    this.#flush();
    await this.#writing;
    // A batch that failed is waiting again: one last try.
    this.#flush();
    await this.#writing;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#failure === undefined && !this.#cleared) {
      await this.store.responseEvents.clear(this.jobId);
      this.#cleared = true;
    }
    if (this.#failure !== undefined) {
      const why = this.#failure instanceof Error ? this.#failure.message : String(this.#failure);
      throw new Error(`the response's events could not be stored: ${why}`);
    }
  }

  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.length === 0) return;
    const batch = this.#pending;
    this.#pending = [];
    this.#writing = this.#writing.then(() => this.#write(batch));
  }

  async #write(batch: PublishedEvent[]): Promise<void> {
    try {
      if (!this.#cleared) {
        await this.store.responseEvents.clear(this.jobId);
        this.#cleared = true;
      }
      await this.store.responseEvents.append(this.jobId, this.attempt, batch);
      this.#failure = undefined;
    } catch (error) {
      // Appending is idempotent, so the batch simply goes again with the next write.
      this.#failure = error;
      this.#pending = [...batch, ...this.#pending];
      this.#timer ??= setTimeout(() => this.#flush(), this.#options.flushMs);
    }
  }
}
