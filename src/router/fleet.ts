import type { Logger } from 'pino';
import { parseDuration } from '../config/duration.js';
import type { Config } from '../config/schema.js';
import { createAdapter, type EngineAdapter, EngineError, type ReplicaTarget } from '../engines/index.js';
import type { RequestClass } from './classify.js';
import { countRoute } from './metrics.js';

type EngineConfig = Config['engines'][string];

/** A replica's live state as the router sees it. */
export class Replica implements ReplicaTarget {
  inFlight = 0;
  healthy = true;
  ejectedUntil = 0;
  failures = 0;
  readonly apiKey: string | undefined;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly maxConcurrency: number;
  readonly healthPath: string;
  /** How errors name the replica: the engine and its index, never its address. */
  readonly label: string;

  constructor(
    readonly engine: string,
    readonly index: number,
    readonly url: string,
    readonly config: EngineConfig,
    readonly adapter: EngineAdapter,
  ) {
    this.apiKey = config.api_key;
    this.timeoutMs = parseDuration(config.timeout);
    this.connectTimeoutMs = parseDuration(config.connect_timeout);
    this.maxConcurrency = config.max_concurrency;
    this.healthPath = config.health_path;
    this.label = `${engine} replica ${index}`;
  }

  /** Up (by the last health check) and not ejected for repeated errors. */
  get available(): boolean {
    return this.healthy && Date.now() >= this.ejectedUntil;
  }

  get hasRoom(): boolean {
    return this.inFlight < this.maxConcurrency;
  }
}

/** How a replica is picked among those with room; kept behind this interface so cache-aware choice can replace it. */
export interface ReplicaChooser {
  choose(replicas: readonly Replica[]): Replica | undefined;
}

/** Least in flight, ties broken by rotation so equal replicas share the load. */
export class LeastInFlight implements ReplicaChooser {
  #turn = 0;

  choose(replicas: readonly Replica[]): Replica | undefined {
    let best: Replica | undefined;
    const offset = this.#turn++;
    for (let i = 0; i < replicas.length; i++) {
      const replica = replicas[(i + offset) % replicas.length] as Replica;
      if (!best || replica.inFlight < best.inFlight) best = replica;
    }
    return best;
  }
}

/** The replica a request got, with what the job records and the header shows. */
export interface Lease {
  replica: Replica;
  requestClass: RequestClass;
  overflow: boolean;
  /** Frees the slot; a failure counts toward ejecting the replica. */
  release(outcome: 'ok' | EngineError): void;
}

const EJECT_AFTER_FAILURES = 3;
const EJECT_FOR_MS = 10_000;
const HEALTH_EVERY_MS = 5_000;

/**
 * Every engine replica, their health and their free slots. `acquire` waits for a slot on a local
 * replica of the right pool, and hands a request to an overflow engine only when the local fleet is
 * full for longer than `routing.overflow_after_ms`, or down.
 */
export class Fleet {
  readonly replicas: Replica[] = [];
  readonly #adapters = new Map<string, EngineAdapter>();
  readonly #waiters = new Set<() => void>();
  readonly #chooser: ReplicaChooser = new LeastInFlight();
  #healthTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
  ) {
    for (const [name, engine] of Object.entries(config.engines)) {
      let adapter = this.#adapters.get(engine.adapter);
      if (!adapter) {
        adapter = createAdapter(engine.adapter);
        this.#adapters.set(engine.adapter, adapter);
      }
      engine.replicas.forEach((url, index) => {
        this.replicas.push(new Replica(name, index, url.replace(/\/+$/, ''), engine, adapter));
      });
    }
  }

  startHealthChecks(): void {
    const check = async () => {
      await Promise.all(
        this.replicas.map(async (replica) => {
          const healthy = await replica.adapter.healthy(replica, Math.min(2000, replica.timeoutMs));
          if (healthy !== replica.healthy) {
            this.log.warn(
              { engine: replica.engine, replica: replica.url, healthy },
              'replica health changed',
            );
            replica.healthy = healthy;
            if (healthy) this.#wake();
          }
        }),
      );
    };
    void check();
    this.#healthTimer = setInterval(() => void check(), HEALTH_EVERY_MS);
    this.#healthTimer.unref();
  }

  /** The engine's own name for a public model, on this replica's engine. */
  upstreamModel(replica: Replica, model: string): string {
    return replica.config.models[model] ?? model;
  }

  serves(model: string): boolean {
    return this.replicas.some((r) => !r.config.overflow && model in r.config.models);
  }

  /**
   * Local replicas for the model that are up and not excluded: those of the pools for this class,
   * else — none configured, or all of them down — of any local pool that has the model.
   */
  #localUp(model: string, requestClass: RequestClass, exclude: ReadonlySet<Replica>): Replica[] {
    const local = this.replicas.filter(
      (r) => !r.config.overflow && model in r.config.models && r.available && !exclude.has(r),
    );
    const pool = local.filter((r) => r.config.serves === requestClass);
    return pool.length > 0 ? pool : local;
  }

  async acquire(
    model: string,
    requestClass: RequestClass,
    signal: AbortSignal,
    exclude: ReadonlySet<Replica> = new Set(),
  ): Promise<Lease> {
    const started = Date.now();
    const overflowAfter = this.config.routing.overflow_after_ms;
    const queueTimeout = parseDuration(this.config.routing.queue_timeout);
    const overflow = this.replicas.filter((r) => r.config.overflow && model in r.config.models);
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const up = this.#localUp(model, requestClass, exclude);
      const waited = Date.now() - started;
      const free = up.filter((r) => r.hasRoom);
      if (free.length > 0) return this.#lease(this.#chooser.choose(free) as Replica, requestClass, false);
      // Overflow only as a valve: the local fleet is full for too long, or none of it is up.
      if (up.length === 0 || waited >= overflowAfter) {
        const spare = overflow.filter((r) => r.available && r.hasRoom && !exclude.has(r));
        if (spare.length > 0) return this.#lease(this.#chooser.choose(spare) as Replica, requestClass, true);
      }
      if (up.length === 0 && overflow.every((r) => !r.available || exclude.has(r))) {
        throw new EngineError(`no replica serving ${model} is up`, 'unavailable', true, 503);
      }
      if (waited >= queueTimeout) {
        throw new EngineError(
          `every replica serving ${model} stayed busy for ${queueTimeout} ms`,
          'timeout',
          true,
        );
      }
      const until =
        waited < overflowAfter && overflow.length > 0 ? overflowAfter - waited : queueTimeout - waited;
      await this.#waitForSlot(Math.max(1, Math.min(until, 1000)), signal);
    }
  }

  #lease(replica: Replica, requestClass: RequestClass, overflow: boolean): Lease {
    replica.inFlight++;
    countRoute(requestClass, replica.engine, overflow);
    let released = false;
    return {
      replica,
      requestClass,
      overflow,
      release: (outcome) => {
        if (released) return;
        released = true;
        replica.inFlight--;
        if (outcome === 'ok') replica.failures = 0;
        else if (outcome.kind !== 'rejected' && ++replica.failures >= EJECT_AFTER_FAILURES) {
          replica.ejectedUntil = Date.now() + EJECT_FOR_MS;
          replica.failures = 0;
          this.log.warn(
            { engine: replica.engine, replica: replica.url },
            'replica ejected after repeated errors',
          );
        }
        this.#wake();
      },
    };
  }

  #waitForSlot(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      this.#waiters.add(done);
    });
  }

  #wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }

  /** Replica gauges in Prometheus text format. */
  metrics(): string {
    const label = (r: Replica) => `engine="${r.engine}",replica="${r.index}"`;
    return [
      '# HELP kiln_replica_in_flight Requests in flight on the replica.',
      '# TYPE kiln_replica_in_flight gauge',
      ...this.replicas.map((r) => `kiln_replica_in_flight{${label(r)}} ${r.inFlight}`),
      '# HELP kiln_replica_available 1 when the replica is up and not ejected.',
      '# TYPE kiln_replica_available gauge',
      ...this.replicas.map((r) => `kiln_replica_available{${label(r)}} ${r.available ? 1 : 0}`),
    ].join('\n');
  }

  async close(): Promise<void> {
    clearInterval(this.#healthTimer);
    this.#wake();
    await Promise.all([...this.#adapters.values()].map((a) => a.close()));
  }
}
