import type { Logger } from 'pino';
import { parseDuration } from '../../config/duration.js';
import type { Config } from '../../config/schema.js';
import type { RunnerTarget } from './adapter.js';

type RunnerConfig = Config['runners'][string];

/** How often each runner's `/system_stats` is asked, and how long an answer may take. */
export const RUNNER_PROBE_EVERY_MS = 2_000;
const PROBE_TIMEOUT_MS = 2_000;

/** A configured ComfyUI runner, its prompts in flight and whether its last probe answered. */
export class Runner implements RunnerTarget {
  inFlight = 0;
  /** Up until a probe says otherwise, as chat replicas are. */
  healthy = true;
  readonly timeoutMs: number;

  constructor(
    readonly name: string,
    readonly config: RunnerConfig,
  ) {
    this.timeoutMs = parseDuration(config.timeout);
  }

  get url(): string {
    return this.config.url;
  }

  get maxConcurrency(): number {
    return this.config.max_concurrency;
  }
}

/** Every runner that serves the model is down: the job fails now rather than wait for one. */
export class RunnersDown extends Error {
  constructor(model: string, names: string[]) {
    super(
      `every runner that serves ${model} is down (${names.join(', ')}): its last health check got no answer`,
    );
    this.name = 'RunnersDown';
  }
}

/**
 * The runners and which models they serve. A request goes to the least busy runner that serves its
 * model, is up and has room; when none serves it, to any runner, which then says in its own words
 * what is missing (Kiln reports that as `workflow-model-missing`). Runners are probed like chat
 * replicas (`GET /system_stats`), and a reload swaps the set without dropping prompts in flight.
 */
export class RunnerPool {
  runners: Runner[];
  readonly #waiters = new Set<() => void>();
  #timer: NodeJS.Timeout | undefined;

  constructor(
    config: Config['runners'],
    private readonly log?: Logger,
  ) {
    this.runners = Object.entries(config).map(([name, runner]) => new Runner(name, runner));
  }

  /** Whether a runner that is up serves the model: `ready` in /v1/models. */
  serves(model: string): boolean {
    return this.runners.some((r) => r.healthy && r.config.models.includes(model));
  }

  /**
   * Takes the runners of `config` from now on. A runner whose name and settings are unchanged is
   * kept (its prompts and health with it); a removed one finishes the prompts it has, unseen by new ones.
   */
  reconfigure(config: Config['runners']): void {
    const current = new Map(this.runners.map((r) => [r.name, r]));
    this.runners = Object.entries(config).map(([name, settings]) => {
      const kept = current.get(name);
      return kept && JSON.stringify(kept.config) === JSON.stringify(settings)
        ? kept
        : new Runner(name, settings);
    });
    this.#wake();
    void this.probeAll();
  }

  startHealthChecks(everyMs = RUNNER_PROBE_EVERY_MS): void {
    void this.probeAll();
    this.#timer = setInterval(() => void this.probeAll(), everyMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async probeAll(): Promise<void> {
    await Promise.all(this.runners.map((runner) => this.#probe(runner)));
  }

  async #probe(runner: Runner): Promise<void> {
    let healthy: boolean;
    try {
      const answer = await fetch(`${runner.url.replace(/\/+$/, '')}/system_stats`, {
        signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      });
      await answer.body?.cancel();
      healthy = answer.ok;
    } catch {
      healthy = false;
    }
    if (healthy === runner.healthy) return;
    runner.healthy = healthy;
    this.log?.warn({ runner: runner.name, healthy }, 'runner health changed');
    this.#wake();
  }

  /** Waits for room on a runner for the model; `release` frees it. Throws RunnersDown when all that serve it are. */
  async acquire(model: string, signal: AbortSignal): Promise<{ runner: Runner; release(): void }> {
    if (this.runners.length === 0) throw new Error('no ComfyUI runner is configured');
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const serving = this.runners.filter((r) => r.config.models.includes(model));
      const candidates = (serving.length > 0 ? serving : this.runners).filter((r) => r.healthy);
      if (candidates.length === 0) {
        throw new RunnersDown(
          model,
          (serving.length > 0 ? serving : this.runners).map((r) => r.name),
        );
      }
      const runner = candidates
        .filter((r) => r.inFlight < r.config.max_concurrency)
        .sort((a, b) => a.inFlight - b.inFlight)[0];
      if (runner) {
        runner.inFlight++;
        let released = false;
        return {
          runner,
          release: () => {
            if (released) return;
            released = true;
            runner.inFlight--;
            this.#wake();
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

  #wake(): void {
    for (const wake of [...this.#waiters]) wake();
  }
}
