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
