import type { Logger } from 'pino';
import { parseDuration } from '../config/duration.js';
import type { Config } from '../config/schema.js';
import {
  createAdapter,
  type EngineAdapter,
  EngineError,
  type ModelTraits,
  type ReplicaTarget,
} from '../engines/index.js';
import type { RequestClass } from './classify.js';
import type { RoutingMemory } from './memory.js';
import { countRoute } from './metrics.js';
import { CacheAwarePolicy } from './policies/cache-aware.js';
import { SglangCacheAware } from './policies/sglang.js';
import { LeastLoadPolicy, RoundRobinPolicy } from './policies/simple.js';
import type { Choice, Outcome, ReplicaView, RoutingPolicy, RoutingRequest } from './policy.js';

type EngineConfig = Config['engines'][string];

/** KV capacity assumed for a replica whose engine neither is configured with one nor reports it. */
const DEFAULT_KV_CAPACITY_TOKENS = 131_072;
/** An engine's own load figure older than this is not trusted. */
const ENGINE_LOAD_FRESH_MS = 3_000;

/** A replica's live state as the router sees it. */
export class Replica implements ReplicaTarget, ReplicaView {
  inFlight = 0;
  healthy = true;
  ejectedUntil = 0;
  failures = 0;
  pendingPrefillTokens = 0;
  /** From the engine's metrics: running + waiting, and when that was read. */
  #engineLoad: { value: number; at: number } | undefined;
  discoveredKvTokens: number | undefined;
  /** The context size: configured, else discovered from the engine once it answers. */
  contextTokens: number | undefined;
  /** Whether the model reads images: configured, else as the engine says; undefined: not said. */
  vision: boolean | undefined;
  /** The engine has described its model since the replica last came up. */
  described = false;
  lifetimeCounter: number | undefined;
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
    this.contextTokens = config.context_tokens;
    this.vision = config.vision;
  }

  /** What the engine says of its model, where the config does not say it already. */
  learn(traits: ModelTraits): void {
    if (this.config.context_tokens === undefined && traits.contextTokens !== undefined) {
      this.contextTokens = traits.contextTokens;
    }
    if (this.config.vision === undefined && traits.vision !== undefined) this.vision = traits.vision;
    if (traits.contextTokens !== undefined || traits.vision !== undefined) this.described = true;
  }

  /** Whether the engine's config names this public model; own names only, so `constructor` is none. */
  offers(model: string): boolean {
    return Object.hasOwn(this.config.models, model);
  }

  /** Up (by the last health check) and not ejected for repeated errors. */
  get available(): boolean {
    return this.healthy && Date.now() >= this.ejectedUntil;
  }

  get hasRoom(): boolean {
    return this.inFlight < this.maxConcurrency;
  }

  get engineLoad(): number | undefined {
    const load = this.#engineLoad;
    return load && Date.now() - load.at < ENGINE_LOAD_FRESH_MS ? load.value : undefined;
  }

  set engineLoad(value: number | undefined) {
    this.#engineLoad = value === undefined ? undefined : { value, at: Date.now() };
  }

  get kvCapacityTokens(): number {
    return this.config.kv_cache_tokens ?? this.discoveredKvTokens ?? DEFAULT_KV_CAPACITY_TOKENS;
  }

  /** Whether a request of `tokens` (prompt plus output) fits the replica's context, as far as known. */
  fits(tokens: number): boolean {
    return this.contextTokens === undefined || tokens <= this.contextTokens;
  }

  /**
   * Whether images may go here: the model reads them by config or by the engine's word, or nothing
   * says otherwise once the engine has been asked (an overflow engine is not asked).
   */
  get readsImages(): boolean {
    return this.vision ?? (this.described || this.config.overflow);
  }

  /** Whether the replica can take the request: its context holds it, its model reads its images. */
  suits(request: AcquireRequest): boolean {
    return this.fits(request.contextNeeded) && (!request.images || this.readsImages);
  }
}

/** The replica a request got, with what the job records and the header shows. */
export interface Lease {
  replica: Replica;
  requestClass: RequestClass;
  overflow: boolean;
  /** Prompt tokens the policy expects the replica to find in its cache. */
  predictedCachedTokens: number;
  /** The replica has produced its first token: its prefill is done. */
  prefillDone(): void;
  /** Frees the slot; a failure counts toward ejecting the replica. The engine's usage teaches the policy. */
  release(outcome: 'ok' | EngineError, usage?: Omit<Outcome, 'ok'>): void;
}

/** The request as `acquire` needs it. */
export interface AcquireRequest {
  model: string;
  requestClass: RequestClass;
  routing: RoutingRequest;
  /** Prompt plus output tokens the replica's context must hold. */
  contextNeeded: number;
  /** The messages hold images, which only a model that reads them can take. */
  images: boolean;
}

const EJECT_AFTER_FAILURES = 3;
const EJECT_FOR_MS = 10_000;
const HEALTH_EVERY_MS = 5_000;
const PROBE_EVERY_MS = 1_000;

function createPolicy(config: EngineConfig, memory: RoutingMemory): RoutingPolicy {
  switch (config.routing.policy) {
    case 'least-load':
      return new LeastLoadPolicy();
    case 'round-robin':
      return new RoundRobinPolicy();
    case 'sglang':
      return new SglangCacheAware();
    default:
      return new CacheAwarePolicy(memory.index, {
        // Past half its slots above the least busy replica, a replica takes no new request.
        balanceAbsThreshold:
          config.routing.balance_abs_threshold ?? Math.max(1, Math.floor(config.max_concurrency / 2)),
        share: (url, chain, capacity) => memory.share(url, chain, capacity),
      });
  }
}

/**
 * Every engine replica, their health, load and free slots. `acquire` waits for a slot on a local
 * replica of the right pool, chosen by the pool's routing policy, and hands a request to an
 * overflow engine only when the local fleet is full for longer than `routing.overflow_after_ms`,
 * or down.
 */
export class Fleet {
  readonly replicas: Replica[] = [];
  readonly #adapters = new Map<string, EngineAdapter>();
  readonly #waiters = new Set<() => void>();
  /** One policy per engine pool. */
  readonly #policies = new Map<string, RoutingPolicy>();
  #timers: NodeJS.Timeout[] = [];
  /** `routing.queue_timeout`, read once rather than on every acquire. */
  readonly #queueTimeoutMs: number;

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly memory: RoutingMemory,
  ) {
    this.#queueTimeoutMs = parseDuration(config.routing.queue_timeout);
    for (const [name, engine] of Object.entries(config.engines)) {
      let adapter = this.#adapters.get(engine.adapter);
      if (!adapter) {
        adapter = createAdapter(engine.adapter);
        this.#adapters.set(engine.adapter, adapter);
      }
      this.#policies.set(name, createPolicy(engine, memory));
      engine.replicas.forEach((url, index) => {
        const replica = new Replica(name, index, url.replace(/\/+$/, ''), engine, adapter);
        // What the engine said before a reload holds until it is asked again.
        const known = memory.traits.get(replica.url);
        if (known) replica.learn(known);
        this.replicas.push(replica);
      });
    }
  }

  policy(engine: string): RoutingPolicy {
    return this.#policies.get(engine) as RoutingPolicy;
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
            // A replica that was down comes back with an empty cache, perhaps with another model.
            if (healthy) {
              this.#lostCache(replica);
              replica.described = false;
              this.#wake();
            }
          }
          if (healthy && !replica.described && this.#asks(replica)) await this.#describe(replica);
        }),
      );
    };
    const probe = async () => {
      await Promise.all(this.replicas.map((replica) => this.#probe(replica)));
    };
    void check();
    void probe();
    this.#timers = [
      setInterval(() => void check(), HEALTH_EVERY_MS),
      setInterval(() => void probe(), PROBE_EVERY_MS),
    ];
    for (const timer of this.#timers) timer.unref();
  }

  /** Whether the engine is asked about its model: a local one, for what its config leaves open. */
  #asks(replica: Replica): boolean {
    const { config } = replica;
    return !config.overflow && (config.context_tokens === undefined || config.vision === undefined);
  }

  /** Asks the engine for its model's context size and whether it reads images. */
  async #describe(replica: Replica): Promise<void> {
    const model = Object.values(replica.config.models)[0];
    if (model === undefined) return;
    const traits = await replica.adapter.describe(replica, model, 2000).catch(() => ({}) as ModelTraits);
    replica.learn(traits);
    if (replica.described) this.memory.traits.set(replica.url, traits);
  }

  /** Reads the engine's own load, KV capacity and lifetime counter from its metrics. */
  async #probe(replica: Replica): Promise<void> {
    // Overflow capacity (a cloud API) is not ours to scrape, and routes no prefixes.
    if (!replica.healthy || replica.config.overflow) return;
    const probe = await replica.adapter.probe(replica, 1000).catch(() => ({}) as Record<string, never>);
    replica.engineLoad = probe.load;
    if (probe.kvCapacityTokens !== undefined) replica.discoveredKvTokens = probe.kvCapacityTokens;
    if (probe.lifetimeCounter !== undefined) {
      const before = replica.lifetimeCounter;
      replica.lifetimeCounter = probe.lifetimeCounter;
      if (before !== undefined && probe.lifetimeCounter < before) {
        this.log.warn(
          { engine: replica.engine, replica: replica.url },
          'replica restarted: its cache is empty',
        );
        this.#lostCache(replica);
        // Perhaps with another model, or the same one without its projector: ask again.
        replica.described = false;
      }
    }
  }

  #lostCache(replica: Replica): void {
    this.policy(replica.engine).forget?.(replica);
  }

  /** The engine's own name for a public model, on this replica's engine. */
  upstreamModel(replica: Replica, model: string): string {
    return replica.offers(model) ? (replica.config.models[model] as string) : model;
  }

  serves(model: string): boolean {
    return this.replicas.some((r) => !r.config.overflow && r.offers(model));
  }

  /** A replica able to count the model's tokens exactly, if any is up. */
  counter(model: string): Replica | undefined {
    return this.replicas.find(
      (r) => !r.config.overflow && r.offers(model) && r.available && r.adapter.capabilities.introspection,
    );
  }

  /**
   * Local replicas for the model that are up, not excluded and suited to the request (their context
   * holds it, their model reads its images):
   * those of the pools for this class; else those of the long-context pools (the class's pools are
   * too small for it); else — none configured, or all down — of any local pool that has the model.
   */
  #localUp(request: AcquireRequest, exclude: ReadonlySet<Replica>): Replica[] {
    const local = this.replicas.filter(
      (r) => !r.config.overflow && r.offers(request.model) && r.available && !exclude.has(r),
    );
    const fitting = local.filter((r) => r.suits(request));
    const inClass = (c: RequestClass) => fitting.filter((r) => r.config.serves === c);
    const pool = inClass(request.requestClass);
    if (pool.length > 0) return pool;
    const long = inClass('long-context');
    if (long.length > 0) return long;
    if (fitting.length > 0) return fitting;
    // None up suits. While one that would (down, ejected, already tried) exists, no other is sent
    // the prompt; only a prompt no replica of the model can take goes on, for the engine to refuse.
    const anyFits = this.replicas.some(
      (r) => !r.config.overflow && r.offers(request.model) && r.suits(request),
    );
    return anyFits ? [] : local;
  }

  async acquire(
    request: AcquireRequest,
    signal: AbortSignal,
    exclude: ReadonlySet<Replica> = new Set(),
  ): Promise<Lease> {
    const started = Date.now();
    const overflowAfter = this.config.routing.overflow_after_ms;
    const queueTimeout = this.#queueTimeoutMs;
    const { model } = request;
    const overflow = this.replicas.filter((r) => r.config.overflow && r.offers(model));
    for (;;) {
      if (signal.aborted) throw signal.reason;
      const up = this.#localUp(request, exclude);
      const waited = Date.now() - started;
      const free = up.filter((r) => r.hasRoom);
      if (free.length > 0) return this.#lease(this.#choose(free, request), request, false);
      // Overflow only as a valve: the local fleet is full for too long, or none of it is up.
      if (up.length === 0 || waited >= overflowAfter) {
        const spare = overflow.filter((r) => r.available && r.hasRoom && !exclude.has(r) && r.suits(request));
        if (spare.length > 0) return this.#lease(this.#choose(spare, request), request, true);
      }
      if (up.length === 0 && overflow.every((r) => !r.available || exclude.has(r) || !r.suits(request))) {
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

  /** The policy of the first candidate's pool decides (candidates of one class usually share a pool). */
  #choose(
    candidates: Replica[],
    request: AcquireRequest,
  ): { choice: Choice<Replica>; policy: RoutingPolicy } {
    const policy = this.policy((candidates[0] as Replica).engine);
    return { choice: policy.choose(candidates, request.routing), policy };
  }

  #lease(
    picked: { choice: Choice<Replica>; policy: RoutingPolicy },
    request: AcquireRequest,
    overflow: boolean,
  ): Lease {
    const { choice, policy } = picked;
    const { replica } = choice;
    replica.inFlight++;
    const prefill = Math.max(0, request.routing.promptTokens - choice.predictedCachedTokens);
    replica.pendingPrefillTokens += prefill;
    countRoute(request.requestClass, replica.engine, overflow);
    let prefilling = true;
    const prefillDone = () => {
      if (!prefilling) return;
      prefilling = false;
      replica.pendingPrefillTokens -= prefill;
    };
    let released = false;
    return {
      replica,
      requestClass: request.requestClass,
      overflow,
      predictedCachedTokens: choice.predictedCachedTokens,
      prefillDone,
      release: (outcome, usage) => {
        if (released) return;
        released = true;
        const prefilled = !prefilling;
        prefillDone();
        replica.inFlight--;
        policy.observe?.(replica, request.routing, choice, { ok: outcome === 'ok', prefilled, ...usage });
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
    const gauge = (name: string, help: string, value: (r: Replica) => number | undefined) => [
      `# HELP ${name} ${help}`,
      `# TYPE ${name} gauge`,
      ...this.replicas.flatMap((r) => {
        const v = value(r);
        return v === undefined ? [] : [`${name}{${label(r)}} ${v}`];
      }),
    ];
    return [
      ...gauge('kiln_replica_in_flight', 'Requests in flight on the replica.', (r) => r.inFlight),
      ...gauge('kiln_replica_available', '1 when the replica is up and not ejected.', (r) =>
        r.available ? 1 : 0,
      ),
      ...gauge(
        'kiln_replica_pending_prefill_tokens',
        'Prompt tokens routed to the replica whose prefill has not finished (this process).',
        (r) => r.pendingPrefillTokens,
      ),
      ...gauge(
        'kiln_replica_engine_load',
        'Running plus waiting requests as the engine reports them (all gateways).',
        (r) => r.engineLoad,
      ),
      ...gauge(
        'kiln_replica_kv_capacity_tokens',
        'KV cache capacity the router assumes.',
        (r) => r.kvCapacityTokens,
      ),
      ...gauge(
        'kiln_replica_context_tokens',
        'Context size of the replica, where known.',
        (r) => r.contextTokens,
      ),
    ].join('\n');
  }

  async close(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer);
    this.#wake();
    await Promise.all([...this.#adapters.values()].map((a) => a.close()));
  }
}
