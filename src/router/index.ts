import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { type ChatChunk, type ChatCompletion, type ChatMessage, EngineError } from '../engines/index.js';
import { classify, PrefixTracker, type RequestClass } from './classify.js';
import { Fleet, type Replica } from './fleet.js';

export { EngineError } from '../engines/index.js';
export type { RequestClass } from './classify.js';

type PersonaConfig = Config['personas'][string];

/** Where a request went: recorded on its job and shown in the `x-kiln-route` header. */
export interface Route {
  class: RequestClass;
  engine: string;
  replica: number;
  overflow: boolean;
  /** The replica's URL: recorded on the job for operators, never sent to clients. */
  url: string;
}

export const routeHeader = (route: Route) =>
  `class=${route.class}; engine=${route.engine}; replica=${route.replica}; overflow=${route.overflow}`;

export interface ResolvedModel {
  /** The model the fleet serves. */
  model: string;
  persona?: { name: string } & PersonaConfig;
}

export interface RouteCall {
  model: ResolvedModel;
  /** The messages to send, preambles already in front. */
  messages: ChatMessage[];
  /** Everything else of the OpenAI body, passed through. */
  body: Record<string, unknown>;
  signal: AbortSignal;
  onChunk?: (chunk: ChatChunk) => void;
  onRoute?: (route: Route) => void;
}

/** Tries per request: the first replica and up to two others, for failures before any output. */
const MAX_TRIES = 3;

/**
 * Personas, request classes and replica choice (spec section 1.3), over one configuration. A reload
 * builds a new Router; the old one finishes its requests and then closes.
 */
export class Router {
  readonly fleet: Fleet;
  readonly #prefixes: PrefixTracker;

  constructor(
    readonly config: Config,
    private readonly log: Logger,
  ) {
    this.fleet = new Fleet(config, log);
    this.#prefixes = new PrefixTracker(config.routing.prefix_block_chars);
  }

  start(): void {
    this.fleet.startHealthChecks();
  }

  /** A persona by name, or a model some local engine serves; undefined for anything else. */
  resolve(name: string): ResolvedModel | undefined {
    const persona = this.config.personas[name];
    if (persona) return { model: persona.model, persona: { name, ...persona } };
    return this.fleet.serves(name) ? { model: name } : undefined;
  }

  async chat(call: RouteCall): Promise<{ completion: ChatCompletion; route: Route }> {
    const requestClass = classify(call.messages, {
      longContextTokens: this.config.routing.long_context_tokens,
      sharedPreamble: call.model.persona?.shared_preamble ?? false,
      prefixes: this.#prefixes,
    });
    const tried = new Set<Replica>();
    let lastFailure: EngineError | undefined;
    for (let attempt = 1; ; attempt++) {
      let lease: Awaited<ReturnType<Fleet['acquire']>>;
      try {
        lease = await this.fleet.acquire(call.model.model, requestClass, call.signal, tried);
      } catch (error) {
        // Every replica was tried: the caller wants to know why the last one failed.
        throw lastFailure ?? error;
      }
      const { replica } = lease;
      const route: Route = {
        class: requestClass,
        engine: replica.engine,
        replica: replica.index,
        overflow: lease.overflow,
        url: replica.url,
      };
      call.onRoute?.(route);
      try {
        const completion = await replica.adapter.chat(replica, {
          body: {
            ...call.body,
            model: this.fleet.upstreamModel(replica, call.model.model),
            messages: call.messages,
          },
          signal: call.signal,
          ...(call.onChunk ? { onChunk: call.onChunk } : {}),
        });
        lease.release('ok');
        return { completion, route };
      } catch (error) {
        const failure =
          error instanceof EngineError
            ? error
            : new EngineError(String((error as Error).message ?? error), 'broken', false);
        if (call.signal.aborted) {
          // The caller went away or cancelled: not the replica's fault.
          lease.release('ok');
          throw call.signal.reason ?? error;
        }
        lease.release(failure);
        if (!failure.retryable || attempt >= MAX_TRIES) throw failure;
        lastFailure = failure;
        this.log.warn(
          { engine: replica.engine, replica: replica.url, err: failure.message },
          'retrying on another replica',
        );
        tried.add(replica);
      }
    }
  }

  /** Personas and served models for /v1/models; `ready` when a local replica for the model is up. */
  models(): Array<{ id: string; kind: 'persona' | 'chat'; owned_by: string; ready: boolean }> {
    const readyModel = (model: string) =>
      this.fleet.replicas.some((r) => !r.config.overflow && model in r.config.models && r.available);
    const served = new Map<string, string>();
    for (const replica of this.fleet.replicas) {
      if (replica.config.overflow) continue;
      for (const model of Object.keys(replica.config.models))
        if (!served.has(model)) served.set(model, replica.config.owned_by);
    }
    return [
      ...Object.entries(this.config.personas).map(([id, p]) => ({
        id,
        kind: 'persona' as const,
        owned_by: 'kiln',
        ready: readyModel(p.model),
      })),
      ...[...served].map(([id, owner]) => ({
        id,
        kind: 'chat' as const,
        owned_by: owner,
        ready: readyModel(id),
      })),
    ];
  }

  /** Waits for requests in flight to finish (bounded), then closes the engine pools. */
  async retire(maxWaitMs = 600_000): Promise<void> {
    const deadline = Date.now() + maxWaitMs;
    while (this.fleet.replicas.some((r) => r.inFlight > 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await this.fleet.close();
  }
}
