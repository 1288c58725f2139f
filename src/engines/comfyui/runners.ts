import { parseDuration } from '../../config/duration.js';
import type { Config } from '../../config/schema.js';
import type { RunnerTarget } from './adapter.js';

/** A configured ComfyUI runner and its prompts in flight. */
export class Runner implements RunnerTarget {
  inFlight = 0;
  readonly timeoutMs: number;

  constructor(
    readonly name: string,
    readonly config: Config['runners'][string],
  ) {
    this.timeoutMs = parseDuration(config.timeout);
  }

  get url(): string {
    return this.config.url;
  }
}

/**
 * The runners and which models they serve. A request goes to the least busy runner that serves its
 * model and has room; when none serves it, to any runner, which then says in its own words what
 * is missing (Kiln reports that as `workflow-model-missing`).
 */
export class RunnerPool {
  readonly runners: Runner[];
  readonly #waiters = new Set<() => void>();

  constructor(config: Config['runners']) {
    this.runners = Object.entries(config).map(([name, runner]) => new Runner(name, runner));
  }

  serves(model: string): boolean {
    return this.runners.some((r) => r.config.models.includes(model));
  }

  /** Waits for room on a runner for the model; `release` frees it. */
  async acquire(model: string, signal: AbortSignal): Promise<{ runner: Runner; release(): void }> {
    if (this.runners.length === 0) throw new Error('no ComfyUI runner is configured');
    const candidates = this.serves(model)
      ? this.runners.filter((r) => r.config.models.includes(model))
      : this.runners;
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const free = candidates
        .filter((r) => r.inFlight < r.config.max_concurrency)
        .sort((a, b) => a.inFlight - b.inFlight);
      const runner = free[0];
      if (runner) {
        runner.inFlight++;
        let released = false;
        return {
          runner,
          release: () => {
            if (released) return;
            released = true;
            runner.inFlight--;
            for (const wake of [...this.#waiters]) wake();
          },
        };
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          this.#waiters.delete(done);
          signal.removeEventListener('abort', done);
          resolve();
        };
        this.#waiters.add(done);
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }
}
