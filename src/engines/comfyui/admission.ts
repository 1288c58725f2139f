import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';

/**
 * A runner's `max_concurrency` held across every process that sends it prompts. Each Kiln process
 * counts its own prompts, but several workers (or other clients of the same ComfyUI) share one
 * runner, which runs one prompt at a time and queues the rest, where a prompt's timeout would run
 * while it waits. So before it submits, a run waits until the runner's own queue (`GET /queue`,
 * running plus pending, whoever sent them) holds fewer than the limit; and after it submits, a
 * prompt that two processes' checks at the same moment put past the limit is taken back and waits
 * again, the earlier-numbered prompt keeping its place.
 */

/** How often a run waiting for room on a runner looks at its queue again. */
export const ROOM_POLL_MS = 500;
/** How long one look at the queue may take; a runner too slow to answer is not waited for. */
const QUEUE_READ_TIMEOUT_MS = 5_000;

type Headers = Readonly<Record<string, string>>;
/** ComfyUI's queue item: `[number, prompt_id, prompt, extra_data, outputs]`. */
type QueueItem = [number, string, ...unknown[]];

/** The runner's queue, running then pending, in the order it runs them; undefined if it did not answer. */
async function readQueue(
  base: string,
  headers: Headers,
  signal: AbortSignal,
): Promise<QueueItem[] | undefined> {
  try {
    const answer = await request(`${base}/queue`, {
      headers,
      signal: AbortSignal.any([signal, AbortSignal.timeout(QUEUE_READ_TIMEOUT_MS)]),
    });
    if (answer.statusCode !== 200) {
      await answer.body.dump();
      return undefined;
    }
    const queue = (await answer.body.json()) as { queue_running?: unknown; queue_pending?: unknown };
    const items = (list: unknown) =>
      (Array.isArray(list) ? list : []).filter(
        (item): item is QueueItem =>
          Array.isArray(item) && typeof item[0] === 'number' && typeof item[1] === 'string',
      );
    // ComfyUI keeps its pending prompts in a heap and lists them in heap order: by number, they run.
    const pending = items(queue.queue_pending).sort((a, b) => a[0] - b[0]);
    return [...items(queue.queue_running), ...pending];
  } catch {
    if (signal.aborted) throw signal.reason;
    return undefined;
  }
}

/**
 * Resolves once the runner's queue holds fewer than `limit` prompts, or once the runner does not
 * answer the question (the submission then finds out why); throws the signal's reason on abort.
 */
export async function roomOnRunner(base: string, headers: Headers, limit: number, signal: AbortSignal) {
  for (;;) {
    const queue = await readQueue(base, headers, signal);
    if (queue === undefined || queue.length < limit) return;
    await sleep(ROOM_POLL_MS, undefined, { signal });
  }
}

/**
 * Whether the prompt is within the runner's first `limit`, in the order it runs them. One no longer
 * listed has run already; a runner that does not answer is taken at its word that it queued it.
 */
export async function withinLimit(
  base: string,
  promptId: string,
  headers: Headers,
  limit: number,
  signal: AbortSignal,
): Promise<boolean> {
  const queue = await readQueue(base, headers, signal);
  const place = queue?.findIndex((item) => item[1] === promptId) ?? -1;
  return place < limit;
}

/**
 * The runner's timeout, counted only while Kiln has work on the runner: started once a run has
 * room there, stopped while it waits for room again. Its signal aborts with a `TimeoutError`.
 */
export class Deadline {
  readonly #controller = new AbortController();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly ms: number) {}

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  start(): void {
    this.stop();
    this.#timer = setTimeout(
      () =>
        this.#controller.abort(new DOMException('the runner took longer than its timeout', 'TimeoutError')),
      this.ms,
    );
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
