import type { JobRow, Store } from '../store/index.js';
import type { FinishedRun } from '../store/repos/jobs.js';

interface Waiting {
  run: FinishedRun;
  resolve: (row: JobRow | undefined) => void;
  reject: (error: unknown) => void;
}

/**
 * PostgreSQL: the worker runs that end in one turn of the event loop end in one statement
 * (`finishRuns`), each with its usage row, instead of a round trip to the database each. Each caller
 * still hears of its own job only once that statement is committed. Should it fail, every run is
 * ended again on its own (`alone`), so that one run's bad end fails no other.
 */
export class RunEnds {
  #waiting: Waiting[] = [];

  constructor(
    private readonly store: Store,
    private readonly retentionMs: number,
    private readonly alone: (run: FinishedRun) => Promise<JobRow | undefined>,
  ) {}

  /** Ends the run; answers its terminal row, or undefined when its guard no longer held. */
  end(run: FinishedRun): Promise<JobRow | undefined> {
    return new Promise((resolve, reject) => {
      if (this.#waiting.push({ run, resolve, reject }) === 1) setImmediate(() => void this.#flush());
    });
  }

  async #flush(): Promise<void> {
    const batch = this.#waiting.splice(0);
    let rows: Array<JobRow | undefined>;
    try {
      rows = await this.store.transaction(
        (tx) =>
          tx.jobs.finishRuns(
            batch.map((w) => w.run),
            Date.now(),
            this.retentionMs,
          ),
        { oneStatement: true },
      );
    } catch {
      for (const w of batch) this.alone(w.run).then(w.resolve, w.reject);
      return;
    }
    batch.forEach((w, i) => {
      w.resolve(rows[i]);
    });
  }
}
