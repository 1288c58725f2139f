import { EventEmitter } from 'node:events';
import type { JobRow, SqlDriver } from '../store/index.js';

/** What processes tell each other about jobs. Partial output travels here too, never through the store. */
export type JobEvent =
  /** `job` travels only within the process that finished it; other processes read the store. */
  | { t: 'done'; id: string; job?: JobRow }
  | { t: 'cancel'; id: string }
  | { t: 'part'; id: string; data: unknown }
  | { t: 'meta'; id: string; meta: Record<string, unknown> }
  | { t: 'progress'; id: string; progress: number };

/** Tells this process's own notifications apart when the store echoes them back. */
const ORIGIN = `${process.pid}:${Math.random().toString(36).slice(2)}`;

/**
 * Job events for this process, fed by the store's notification channel (PostgreSQL NOTIFY reaches
 * every gateway and worker; SQLite stays in process). Listeners subscribe per job id.
 */
export class JobEvents {
  readonly #local = new EventEmitter().setMaxListeners(0);
  #unlisten: (() => Promise<void>) | undefined;

  constructor(private readonly driver: SqlDriver) {}

  async start(): Promise<void> {
    this.#unlisten = await this.driver.listen('kiln_job_events', (payload) => {
      let message: { o: string; e: JobEvent };
      try {
        message = JSON.parse(payload) as { o: string; e: JobEvent };
      } catch {
        return;
      }
      if (message.o !== ORIGIN) this.#emit(message.e);
    });
  }

  async stop(): Promise<void> {
    await this.#unlisten?.();
  }

  /**
   * Delivers the event in this process at once, in order (a stream's chunks go straight from the
   * worker to the waiting request), and through the store to every other process.
   */
  publish(event: JobEvent): Promise<void> {
    this.#emit(event);
    if (!this.driver.dialect.sharedAcrossProcesses) return Promise.resolve();
    const shared = event.t === 'done' ? { t: 'done', id: event.id } : event;
    // Best effort across processes: waiters also re-read the store, so a lost notification only delays.
    return this.driver
      .notify('kiln_job_events', JSON.stringify({ o: ORIGIN, e: shared }))
      .catch(() => undefined);
  }

  #emit(event: JobEvent): void {
    this.#local.emit(event.id, event);
    this.#local.emit('*', event);
  }

  /** Calls `handler` for each event of job `id` (or of every job, with '*'); answers the unsubscribe. */
  on(id: string, handler: (event: JobEvent) => void): () => void {
    this.#local.on(id, handler);
    return () => this.#local.off(id, handler);
  }
}
