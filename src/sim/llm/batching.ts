/**
 * Continuous batching, as far as a client can see it: at most `maxSequences` requests run (are in
 * prefill or decode) at once; the rest wait in arrival order and are admitted as soon as a running
 * one finishes, not at the end of a whole batch.
 */
export class SequenceSlots {
  private active = 0;
  private readonly queue: Array<() => void> = [];

  constructor(private readonly maxSequences: number) {}

  get running(): number {
    return this.active;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Resolves true once this request may run (the caller must then `release()` exactly once), or
   * false if `signal` aborts first; an aborted request leaves the queue without taking a slot.
   */
  acquire(signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false);
    if (this.active < this.maxSequences && this.queue.length === 0) {
      this.active++;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const admit = () => {
        signal.removeEventListener('abort', leave);
        this.active++;
        resolve(true);
      };
      const leave = () => {
        const at = this.queue.indexOf(admit);
        if (at >= 0) this.queue.splice(at, 1);
        resolve(false);
      };
      this.queue.push(admit);
      signal.addEventListener('abort', leave, { once: true });
    });
  }

  release(): void {
    this.active--;
    while (this.active < this.maxSequences) {
      const next = this.queue.shift();
      if (!next) break;
      next();
    }
  }
}

/**
 * The engine's compute, as prefill sees it: one lane shared by every running sequence, taken one
 * prefill at a time in arrival order (a GPU does not prefill two prompts faster than one after the
 * other). The lane keeps a schedule rather than trusting wake-ups: a prefill starts when the one
 * before was due to end, so timer lateness never piles up down a long queue.
 */
export class PrefillLane {
  private readonly turn = new SequenceSlots(1);
  /** When the prefill last holding the lane ended or is due to end (performance.now() time). */
  private freeAt = 0;

  /** Sequences queued for the lane, not counting the one prefilling. */
  get waiting(): number {
    return this.turn.waiting;
  }

  /**
   * Resolves with the time this prefill starts once the lane is this caller's (who must then
   * `leave()` exactly once), or undefined if `signal` aborts first: a sequence that gives up while
   * queued leaves without using any of the lane's time.
   */
  async enter(signal: AbortSignal): Promise<number | undefined> {
    if (!(await this.turn.acquire(signal))) return undefined;
    return Math.max(performance.now(), this.freeAt);
  }

  /** Hands the lane on; `end` is when this prefill was due to end, or now if it was cut short. */
  leave(end: number): void {
    this.freeAt = Math.min(end, performance.now());
    this.turn.release();
  }
}
