import { EventEmitter } from 'node:events';
import type { JobRow, SqlDriver } from '../store/index.js';

/** What processes tell each other about jobs. Partial output travels here too, never through the store. */
export type JobEvent =
  /** `job` travels only within the process that finished it; other processes read the store. */
  | { t: 'done'; id: string; job?: JobRow }
  | { t: 'cancel'; id: string }
  /**
   * One piece of a stream's output: the JSON text of one server-sent event's data, and the run
   * (the job's attempt) that produced it.
   */
  | { t: 'part'; id: string; data: string; a: number }
  | { t: 'meta'; id: string; meta: Record<string, unknown> }
  | { t: 'progress'; id: string; progress: number };

/** A part too long for one notification travels in pieces; `more` marks all but the last. */
type Shared = Exclude<JobEvent, { t: 'part' }> | { t: 'part'; id: string; data: string; a: number; more?: 1 };

const CHANNEL = 'kiln_job_events';
/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. */
const MAX_PAYLOAD_BYTES = 7900;
/** A part's text in one notification, in UTF-16 units: at most 3 bytes each once encoded. */
const MAX_PART_UNITS = 2400;
/** How long a part waits for others to share its notification. */
const PART_BATCH_MS = 10;

/** Tells this process's own notifications apart when the store echoes them back. */
const ORIGIN = `${process.pid}:${Math.random().toString(36).slice(2)}`;

/**
 * Job events for this process, fed by the store's notification channel (PostgreSQL NOTIFY reaches
 * every gateway and worker; SQLite stays in process). Listeners subscribe per job id, or to every
 * job's events but parts with '*'.
 *
 * Every event reaches this process's listeners at once, in order. Across processes, events leave
 * in order through one outbox, many to a notification: parts within PART_BATCH_MS, anything else
 * on the next turn of the event loop. A stream whose job runs in the process that holds its request
 * publishes its parts here only (`publishLocal`): they never touch the store.
 */
export class JobEvents {
  readonly #local = new EventEmitter().setMaxListeners(0);
  #unlisten: (() => Promise<void>) | undefined;
  #outbox: Shared[] = [];
  #flushTimer: NodeJS.Timeout | undefined;
  #flushSoon: NodeJS.Immediate | undefined;
  /** Notifications go one after the other, so other processes see events in publishing order. */
  #sending: Promise<void> = Promise.resolve();
  /** Pieces of long parts from other processes, by job id. */
  readonly #pieces = new Map<string, string[]>();

  constructor(private readonly driver: SqlDriver) {}

  async start(): Promise<void> {
    this.#unlisten = await this.driver.listen(CHANNEL, (payload) => {
      let message: { o: string; e: Shared[] };
      try {
        message = JSON.parse(payload) as { o: string; e: Shared[] };
      } catch {
        return;
      }
      if (message.o === ORIGIN || !Array.isArray(message.e)) return;
      for (const event of message.e) this.#receive(event);
    });
  }

  /** Sends what is waiting in the outbox, then stops listening. */
  async stop(): Promise<void> {
    this.#flush();
    await this.#sending;
    await this.#unlisten?.();
  }

  /** Delivers the event in this process at once and to every other process soon after. */
  publish(event: JobEvent): void {
    this.#emit(event);
    if (!this.driver.dialect.sharedAcrossProcesses) return;
    if (event.t === 'part') {
      for (const piece of pieces(event)) this.#outbox.push(piece);
      this.#flushTimer ??= setTimeout(() => this.#flush(), PART_BATCH_MS);
    } else {
      this.#outbox.push(event.t === 'done' ? { t: 'done', id: event.id } : event);
      this.#flushSoon ??= setImmediate(() => this.#flush());
    }
  }

  /** Delivers the event in this process only: its listeners are all here. */
  publishLocal(event: JobEvent): void {
    this.#emit(event);
  }

  #flush(): void {
    clearTimeout(this.#flushTimer);
    if (this.#flushSoon) clearImmediate(this.#flushSoon);
    this.#flushTimer = undefined;
    this.#flushSoon = undefined;
    if (this.#outbox.length === 0) return;
    const payloads: string[] = [];
    let batch: string[] = [];
    let bytes = 0;
    for (const event of this.#outbox.splice(0)) {
      const text = JSON.stringify(event);
      const size = Buffer.byteLength(text);
      if (batch.length > 0 && bytes + size + 1 > MAX_PAYLOAD_BYTES - ORIGIN.length - 16) {
        payloads.push(envelope(batch));
        batch = [];
        bytes = 0;
      }
      batch.push(text);
      bytes += size + 1;
    }
    payloads.push(envelope(batch));
    // Best effort across processes: waiters also re-read the store, so a lost notification only delays.
    this.#sending = this.#sending.then(async () => {
      for (const payload of payloads) await this.driver.notify(CHANNEL, payload).catch(() => undefined);
    });
  }

  #receive(event: Shared): void {
    if (event.t !== 'part') {
      if (event.t === 'done') this.#pieces.delete(event.id);
      this.#emit(event);
      return;
    }
    const waiting = this.#pieces.get(event.id);
    if (event.more) {
      if (waiting) waiting.push(event.data);
      else this.#pieces.set(event.id, [event.data]);
      return;
    }
    if (waiting) this.#pieces.delete(event.id);
    const data = waiting ? waiting.join('') + event.data : event.data;
    this.#emit({ t: 'part', id: event.id, data, a: event.a });
  }

  #emit(event: JobEvent): void {
    this.#local.emit(event.id, event);
    if (event.t !== 'part') this.#local.emit('*', event);
  }

  /** Calls `handler` for each event of job `id` (or of every job, parts aside, with '*'); answers the unsubscribe. */
  on(id: string, handler: (event: JobEvent) => void): () => void {
    this.#local.on(id, handler);
    return () => this.#local.off(id, handler);
  }
}

const envelope = (events: string[]) => `{"o":${JSON.stringify(ORIGIN)},"e":[${events.join(',')}]}`;

/** A part as notifications can carry it: whole, or in pieces of MAX_PART_UNITS. */
function pieces(event: Extract<JobEvent, { t: 'part' }>): Shared[] {
  const { id, data, a } = event;
  if (data.length <= MAX_PART_UNITS) return [{ t: 'part', id, data, a }];
  const out: Shared[] = [];
  for (let at = 0; at < data.length; at += MAX_PART_UNITS) {
    const end = at + MAX_PART_UNITS;
    out.push(
      end < data.length
        ? { t: 'part', id, data: data.slice(at, end), a, more: 1 }
        : { t: 'part', id, data: data.slice(at), a },
    );
  }
  return out;
}
