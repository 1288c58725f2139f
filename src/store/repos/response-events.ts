import type { SqlExecutor } from '../driver.js';

/** One event of a response's stream, as its `sequence_number` and its whole server-sent event text. */
export interface ResponseEvent {
  seq: number;
  data: string;
}

/** An event on its way to the log, with when its run published it (Unix ms). */
export interface PublishedEvent extends ResponseEvent {
  at: number;
}

/** Events one INSERT carries at most. */
const MAX_ROWS = 64;

/**
 * `rows` rows of VALUES, seq and time cast so PostgreSQL types the columns; NULL rows pad a batch to
 * a power of two, so there are seven statement texts to prepare rather than one per batch size.
 */
function valuesOf(rows: number): string {
  return Array.from({ length: rows }, () => '(CAST(? AS INTEGER), ?, CAST(? AS BIGINT))').join(', ');
}

/**
 * The event log of a background response created streaming, which a client resumes from any
 * gateway (`GET /v1/responses/{id}?stream=true&starting_after=N`). It holds the current run's events:
 * a run clears what an earlier one left before it appends.
 */
export class ResponseEventRepository {
  constructor(private readonly db: SqlExecutor) {}

  /**
   * Appends events of run `attempt` of the job, in one statement per MAX_ROWS events, while that
   * run still holds the job, or once it was cancelled while running (its run_deadline, which a run
   * given back to the queue loses, still set) those it published before the cancel: what live
   * readers were sent. One another run has taken keeps its log as it is. An event already there is
   * kept. Answers how many were added.
   */
  async append(jobId: string, attempt: number, events: readonly PublishedEvent[]): Promise<number> {
    let added = 0;
    for (let from = 0; from < events.length; from += MAX_ROWS) {
      const batch = events.slice(from, from + MAX_ROWS);
      const rows = 2 ** Math.ceil(Math.log2(batch.length));
      const params: unknown[] = [jobId];
      for (const event of batch) params.push(event.seq, event.data, event.at);
      for (let pad = batch.length; pad < rows; pad++) params.push(null, null, null);
      params.push(jobId, attempt);
      added += await this.db.run(
        `INSERT INTO response_events (job_id, seq, data)
         SELECT ?, v.column1, v.column2 FROM (VALUES ${valuesOf(rows)}) AS v
         WHERE v.column1 IS NOT NULL
           AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND attempts = ? AND (status = 'running'
             OR (status = 'cancelled' AND run_deadline IS NOT NULL AND v.column3 <= finished_at)))
         ON CONFLICT (job_id, seq) DO NOTHING`,
        params,
      );
    }
    return added;
  }

  /** Up to `limit` events after `seq` (all of them from -1), in order. */
  async after(jobId: string, seq: number, limit: number): Promise<ResponseEvent[]> {
    return this.db.all<ResponseEvent>(
      'SELECT seq, data FROM response_events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?',
      [jobId, seq, limit],
    );
  }

  /** The log's last event, or undefined for an empty log. */
  async last(jobId: string): Promise<ResponseEvent | undefined> {
    return this.db.get<ResponseEvent>(
      'SELECT seq, data FROM response_events WHERE job_id = ? ORDER BY seq DESC LIMIT 1',
      [jobId],
    );
  }

  /** Deletes the job's events (a new run starts its log afresh; a deleted response keeps none). */
  async clear(jobId: string): Promise<number> {
    return this.db.run('DELETE FROM response_events WHERE job_id = ?', [jobId]);
  }
}
