import { EventEmitter } from 'node:events';
import type { SqlDriver } from '../store/index.js';

/** What processes tell each other about jobs. Partial output travels here too, never through the store. */
export type JobEvent =
  | { t: 'done'; id: string }
  | { t: 'cancel'; id: string }
  | { t: 'part'; id: string; data: unknown }
  | { t: 'progress'; id: string; progress: number };

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
      let event: JobEvent;
      try {
        event = JSON.parse(payload) as JobEvent;
      } catch {
        return;
      }
      this.#local.emit(event.id, event);
      this.#local.emit('*', event);
    });
  }

  async stop(): Promise<void> {
    await this.#unlisten?.();
  }

  publish(event: JobEvent): Promise<void> {
    return this.driver.notify('kiln_job_events', JSON.stringify(event));
  }

  /** Calls `handler` for each event of job `id` (or of every job, with '*'); answers the unsubscribe. */
  on(id: string, handler: (event: JobEvent) => void): () => void {
    this.#local.on(id, handler);
    return () => this.#local.off(id, handler);
  }
}
