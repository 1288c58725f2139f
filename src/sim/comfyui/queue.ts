import {
  type Execution,
  type ExecutionResult,
  executePrompt,
  type RunSettings,
  type Send,
} from './execute.js';
import type { SimFiles } from './files.js';
import type { Prompt } from './validate.js';

/**
 * ComfyUI's `PromptQueue` and its single worker: prompts ordered by `number` (FIFO unless a client
 * sets `front` or `number`), one running at a time, history kept in memory (10,000 entries), and
 * the `status` broadcast on every queue change.
 */

export interface QueueItem extends Execution {
  number: number;
}

/** How ComfyUI lists a queue item or a history prompt: `[number, prompt_id, prompt, extra_data, outputs]`. */
type ItemTuple = [number, string, Prompt, Record<string, unknown>, string[]];

export interface HistoryEntry {
  prompt: ItemTuple;
  outputs: ExecutionResult['outputs'];
  status: { status_str: 'success' | 'error'; completed: boolean; messages: ExecutionResult['messages'] };
  meta: ExecutionResult['meta'];
}

const MAXIMUM_HISTORY_SIZE = 10000;

const tuple = (item: QueueItem): ItemTuple => [
  item.number,
  item.promptId,
  item.prompt,
  item.extraData,
  item.outputs,
];

export class PromptQueue {
  private readonly pending: QueueItem[] = [];
  private running: { item: QueueItem; abort: AbortController; done: Promise<void> } | undefined;
  private readonly history = new Map<string, HistoryEntry>();
  private closed = false;
  /** The node the running prompt is on: a reconnecting client of that prompt is told it. */
  lastNode: string | null = null;
  readonly counts = { prompts: 0, interrupted: 0 };

  constructor(
    private readonly files: SimFiles,
    private readonly send: Send,
    private readonly settings: RunSettings,
  ) {}

  /** `{exec_info: {queue_remaining}}`, as `status` messages and `GET /prompt` carry it. */
  info() {
    return { exec_info: { queue_remaining: this.pending.length + (this.running ? 1 : 0) } };
  }

  private updated() {
    this.send('status', { status: this.info() });
  }

  put(item: QueueItem): void {
    this.counts.prompts++;
    const after = (other: QueueItem) =>
      other.number > item.number || (other.number === item.number && other.promptId > item.promptId);
    const at = this.pending.findIndex(after);
    this.pending.splice(at < 0 ? this.pending.length : at, 0, item);
    this.updated();
    this.next();
  }

  /** `GET /queue`. */
  snapshot() {
    return {
      queue_running: this.running ? [tuple(this.running.item)] : [],
      queue_pending: this.pending.map(tuple),
    };
  }

  get runningClient(): string | undefined {
    const id = this.running?.item.extraData.client_id;
    return typeof id === 'string' ? id : undefined;
  }

  stats() {
    return {
      prompts: this.counts.prompts,
      running: this.running ? 1 : 0,
      queued: this.pending.length,
      interrupted: this.counts.interrupted,
    };
  }

  /** Interrupts the running prompt if it is `promptId` (or whatever runs, without an id); a pending one is ignored. */
  interrupt(promptId?: string): boolean {
    if (!this.running || (promptId !== undefined && this.running.item.promptId !== promptId)) return false;
    if (this.running.abort.signal.aborted) return true;
    this.running.abort.abort(new Error('Processing interrupted'));
    return true;
  }

  /**
   * Removes a queued (not yet running) prompt; an unknown or running one is left alone, silently.
   * As ComfyUI's `delete_queue_item` does, removing the last pending prompt wipes the queue, so two
   * `status` messages go out (one from the wipe, one from the delete).
   */
  delete(promptId: string): boolean {
    const at = this.pending.findIndex((item) => item.promptId === promptId);
    if (at < 0) return false;
    if (this.pending.length === 1) this.clear();
    else this.pending.splice(at, 1);
    this.updated();
    return true;
  }

  /** Drops every pending prompt (the running one goes on), with a `status` even when none was. */
  clear(): void {
    this.pending.length = 0;
    this.updated();
  }

  /** Newer builds' `POST /api/jobs/{id}/cancel`: interrupts it if running, dequeues it if pending. */
  cancel(promptId: string): boolean {
    return this.interrupt(promptId) || this.delete(promptId);
  }

  /** One entry, or the last `maxItems` from `offset` (ComfyUI's `get_history`). */
  entries(
    options: { promptId?: string; maxItems?: number; offset?: number } = {},
  ): Record<string, HistoryEntry> {
    if (options.promptId !== undefined) {
      const entry = this.history.get(options.promptId);
      return entry ? { [options.promptId]: entry } : {};
    }
    const all = [...this.history];
    let offset = options.offset ?? -1;
    if (offset < 0 && options.maxItems !== undefined) offset = all.length - options.maxItems;
    const from = all.slice(Math.max(0, offset));
    return Object.fromEntries(options.maxItems === undefined ? from : from.slice(0, options.maxItems));
  }

  /** Where a prompt is: for `GET /api/jobs/{id}`. */
  locate(
    promptId: string,
  ):
    | { state: 'running' | 'pending'; item: QueueItem }
    | { state: 'history'; entry: HistoryEntry }
    | undefined {
    if (this.running?.item.promptId === promptId) return { state: 'running', item: this.running.item };
    const queued = this.pending.find((item) => item.promptId === promptId);
    if (queued) return { state: 'pending', item: queued };
    const entry = this.history.get(promptId);
    return entry ? { state: 'history', entry } : undefined;
  }

  deleteHistory(promptId?: string): void {
    if (promptId === undefined) this.history.clear();
    else this.history.delete(promptId);
  }

  private next(): void {
    if (this.running || this.closed) return;
    const item = this.pending.shift();
    if (!item) return;
    const abort = new AbortController();
    const done = this.run(item, abort.signal);
    this.running = { item, abort, done };
    this.updated();
  }

  private async run(item: QueueItem, signal: AbortSignal): Promise<void> {
    // Let next() record the running item before the first message goes out.
    await Promise.resolve();
    const result = await executePrompt(
      item,
      {
        files: this.files,
        send: this.send,
        settings: this.settings,
        onNode: (node) => {
          this.lastNode = node;
        },
      },
      signal,
    ).catch(
      (error: unknown): ExecutionResult => ({
        outcome: 'error',
        outputs: {},
        meta: {},
        messages: [['execution_error', { prompt_id: item.promptId, exception_message: String(error) }]],
      }),
    );
    if (result.outcome === 'interrupted') this.counts.interrupted++;
    if (this.history.size > MAXIMUM_HISTORY_SIZE) {
      const oldest = this.history.keys().next().value;
      if (oldest !== undefined) this.history.delete(oldest);
    }
    this.history.set(item.promptId, {
      prompt: tuple(item),
      outputs: result.outputs,
      status: {
        status_str: result.outcome === 'success' ? 'success' : 'error',
        completed: result.outcome === 'success',
        messages: result.messages,
      },
      meta: result.meta,
    });
    this.running = undefined;
    this.lastNode = null;
    this.updated();
    const clientId = item.extraData.client_id;
    if (typeof clientId === 'string')
      this.send('executing', { node: null, prompt_id: item.promptId }, clientId);
    this.next();
  }

  /** Stops the running prompt, drops the queue and waits for the worker to settle. */
  async close(): Promise<void> {
    this.closed = true;
    this.pending.length = 0;
    const running = this.running;
    running?.abort.abort(new Error('simulator closing'));
    await running?.done;
  }
}
