import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import {
  type ChatCall,
  type ChatChunk,
  type ChatCompletion,
  type ChatMessage,
  EngineError,
} from '../engines/index.js';
import { EngineCallTimer } from '../metrics/engines.js';
import { inSpan, type Span, SpanKind, traceHeaders } from '../telemetry/index.js';
import { classify, type RequestClass } from './classify.js';
import { type AcquireRequest, Fleet, type Lease, type Replica } from './fleet.js';
import { RoutingMemory } from './memory.js';
import { countCached } from './metrics.js';
import type { RoutingRequest } from './policy.js';
import { blockChain, cacheSalt, cacheScope, hasImages, leadingChars, routingText } from './prompt.js';

export { EngineError } from '../engines/index.js';
export type { RequestClass } from './classify.js';
export { RoutingMemory } from './memory.js';

type PersonaConfig = Config['personas'][string];

/** Where a request went: recorded on its job and shown in the `x-kiln-route` header. */
export interface Route {
  class: RequestClass;
  engine: string;
  replica: number;
  overflow: boolean;
  /** Prompt tokens the router expected the replica to have cached. */
  cached: number;
  /** Prompt tokens the replica reported cached, once it answered. */
  cached_reported?: number;
  /** The replica's URL: recorded on the job for operators, never sent to clients. */
  url: string;
}

export const routeHeader = (route: Route) =>
  `class=${route.class}; engine=${route.engine}; replica=${route.replica}; overflow=${route.overflow}; cached=${route.cached ?? 0}`;

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
  /** The caller's organisation: with `routing.cache_scope: organisation`, its prompts' cache scope. */
  org?: string;
  onChunk?: (chunk: ChatChunk, text: string) => void;
  onContent?: ChatCall['onContent'];
  onRoute?: (route: Route) => void;
}

/** Tries per request: the first replica and up to two others, for failures before any output. */
const MAX_TRIES = 3;
/** Longest wait for an engine to count a prompt's tokens before the estimate is used instead. */
const COUNT_TIMEOUT_MS = 2_000;

const cachedTokensOf = (completion: ChatCompletion): number | undefined => {
  const details = completion.usage?.prompt_tokens_details as { cached_tokens?: unknown } | undefined;
  return typeof details?.cached_tokens === 'number' ? details.cached_tokens : undefined;
};

/** Which replica an engine span called: its engine, index and address (host and port, no path). */
function engineAttributes(replica: Replica): Record<string, string | number> {
  const url = new URL(replica.url);
  return {
    'kiln.engine': replica.engine,
    'kiln.replica': replica.index,
    'server.address': url.hostname,
    'server.port': Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
  };
}

/**
 * Personas, request classes and replica choice (spec section 1.3), over one configuration. A reload
 * builds a new Router; the old one finishes its requests and then closes. What routing learns (the
 * prefix index, tokens per character) lives in the RoutingMemory, which outlives reloads.
 */
export class Router {
  readonly fleet: Fleet;

  constructor(
    readonly config: Config,
    private readonly log: Logger,
    readonly memory: RoutingMemory = new RoutingMemory(undefined),
  ) {
    this.fleet = new Fleet(config, log, memory);
  }

  start(): void {
    this.fleet.startHealthChecks();
  }

  /** A persona by name, or a model some local engine serves; undefined for anything else. */
  resolve(name: string): ResolvedModel | undefined {
    // Own names only: a caller's `constructor` or `__proto__` is no persona.
    const persona = Object.hasOwn(this.config.personas, name) ? this.config.personas[name] : undefined;
    if (persona) return { model: persona.model, persona: { name, ...persona } };
    return this.fleet.serves(name) ? { model: name } : undefined;
  }

  /**
   * The prompt's size in tokens. Where the long-context decision hangs on it — more characters than
   * the threshold's tokens (a token is rarely under one character) but fewer than eight times that
   * (rarely over eight) — an engine that serves the model counts it; elsewhere, and when no engine
   * can count, the estimate calibrated from the engines' usage serves.
   */
  async #promptTokens(model: string, text: string, messages: readonly ChatMessage[]): Promise<number> {
    const { calibration } = this.memory;
    const estimate = calibration.estimate(model, text.length);
    const threshold = this.config.routing.long_context_tokens;
    if (text.length <= threshold || text.length > threshold * 8) return estimate;
    const counter = this.fleet.counter(model);
    if (!counter) return estimate;
    const upstream = this.fleet.upstreamModel(counter, model);
    const counted = await counter.adapter
      .countTokens(counter, upstream, messages, COUNT_TIMEOUT_MS)
      .catch(() => undefined);
    if (counted === undefined) return estimate;
    calibration.learn(model, text.length, counted);
    return counted;
  }

  async #describe(call: RouteCall): Promise<AcquireRequest> {
    const model = call.model.model;
    const blockChars = this.config.routing.prefix_block_chars;
    const text = routingText(call.messages);
    const promptTokens = await this.#promptTokens(model, text, call.messages);
    const charsPerToken = text.length / Math.max(1, promptTokens);
    const scope = this.config.routing.cache_scope === 'organisation' ? cacheScope(call.org) : '';
    const blocks = blockChain(text, blockChars, scope);
    const routing: RoutingRequest = { text, blocks, blockChars, promptTokens, charsPerToken, scope };
    // The prefix is every message but the new turn; seen before when a replica holds its first block.
    const last = call.messages.length > 0 ? routingText(call.messages.slice(-1)).length : 0;
    const seenPrefix = text.length - last >= blockChars && this.memory.index.anyHolds(blocks[0] as string);
    const requestClass = classify({
      promptTokens,
      leadingTokens: Math.floor(leadingChars(call.messages) / charsPerToken),
      seenPrefix,
      sharedPreamble: call.model.persona?.shared_preamble ?? false,
      longContextTokens: this.config.routing.long_context_tokens,
      sharedPrefixTokens: this.config.routing.shared_prefix_tokens,
    });
    const output = Number(call.body.max_completion_tokens ?? call.body.max_tokens ?? 0);
    return {
      model,
      requestClass,
      routing,
      contextNeeded: promptTokens + (Number.isFinite(output) && output > 0 ? output : 0),
      images: hasImages(call.messages),
    };
  }

  /**
   * Classifies the call, picks a replica and runs it there, trying up to two others on failures
   * before any output: a `router` span, with an `engine` span per try.
   */
  chat(call: RouteCall): Promise<{ completion: ChatCompletion; route: Route }> {
    return inSpan('router', { signal: call.signal }, (span) => this.#route(call, span));
  }

  async #route(
    call: RouteCall,
    span: Span | undefined,
  ): Promise<{ completion: ChatCompletion; route: Route }> {
    const request = await this.#describe(call);
    const tried = new Set<Replica>();
    let lastFailure: EngineError | undefined;
    for (let attempt = 1; ; attempt++) {
      let lease: Lease;
      try {
        lease = await this.fleet.acquire(request, call.signal, tried);
      } catch (error) {
        // Every replica was tried: the caller wants to know why the last one failed.
        throw lastFailure ?? error;
      }
      const { replica } = lease;
      const route: Route = {
        class: request.requestClass,
        engine: replica.engine,
        replica: replica.index,
        overflow: lease.overflow,
        cached: lease.predictedCachedTokens,
        url: replica.url,
      };
      call.onRoute?.(route);
      span?.setAttributes({
        'kiln.model': request.model,
        'kiln.route.class': route.class,
        'kiln.route.engine': route.engine,
        'kiln.route.replica': route.replica,
        'kiln.route.overflow': route.overflow,
        'kiln.route.tries': attempt,
      });
      const { onChunk, onContent } = call;
      const timer = new EngineCallTimer(replica.engine, replica.index);
      try {
        const completion = await inSpan(
          'engine',
          { kind: SpanKind.CLIENT, signal: call.signal },
          (engineSpan) => {
            engineSpan?.setAttributes(engineAttributes(replica));
            return replica.adapter.chat(replica, {
              body: {
                ...call.body,
                model: this.fleet.upstreamModel(replica, call.model.model),
                messages: call.messages,
                // The organisation's own salt, over any the caller sent: no organisation reads another's.
                ...(replica.config.cache_salt && request.routing.scope
                  ? { cache_salt: cacheSalt(request.routing.scope) }
                  : {}),
              },
              signal: call.signal,
              onFirstChunk: () => {
                timer.firstChunk();
                lease.prefillDone();
              },
              ...(onChunk ? { onChunk } : {}),
              ...(onContent ? { onContent } : {}),
              // Names the engine span as the parent of whatever the engine traces of its own.
              headers: traceHeaders(),
            });
          },
        );
        timer.completed(completion.usage?.completion_tokens);
        this.#learn(lease, request, completion);
        const reported = cachedTokensOf(completion);
        return {
          completion,
          route: reported === undefined ? route : { ...route, cached_reported: reported },
        };
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
        timer.failed(failure.kind);
        lease.release(failure);
        tried.add(replica);
        // A prompt too long for this engine goes to the long-context pool rather than failing.
        const tooLong =
          failure.contextLength && failure.beforeOutput && request.requestClass !== 'long-context';
        if (tooLong) {
          this.log.info(
            { engine: replica.engine, replica: replica.index },
            'prompt over the context size: trying long-context',
          );
          request.requestClass = 'long-context';
        } else if (!failure.retryable) throw failure;
        if (attempt >= MAX_TRIES) throw failure;
        lastFailure = failure;
        if (!tooLong) {
          this.log.warn(
            { engine: replica.engine, replica: replica.url, err: failure.message },
            'retrying on another replica',
          );
        }
      }
    }
  }

  /** What the engine's usage teaches: the policy's cache model, tokens per character, the metrics. */
  #learn(lease: Lease, request: AcquireRequest, completion: ChatCompletion): void {
    const promptTokens = completion.usage?.prompt_tokens;
    const cachedTokens = cachedTokensOf(completion);
    lease.release('ok', {
      ...(promptTokens !== undefined ? { promptTokens } : {}),
      ...(cachedTokens !== undefined ? { cachedTokens } : {}),
    });
    if (promptTokens === undefined) return;
    this.memory.calibration.learn(request.model, request.routing.text.length, promptTokens);
    countCached(
      lease.replica.engine,
      lease.replica.index,
      promptTokens,
      lease.predictedCachedTokens,
      cachedTokens ?? 0,
    );
  }

  /** Personas and served models for /v1/models; `ready` when a local replica for the model is up. */
  models(): Array<{ id: string; kind: 'persona' | 'chat'; owned_by: string; ready: boolean }> {
    const readyModel = (model: string) =>
      this.fleet.replicas.some((r) => !r.config.overflow && r.offers(model) && r.available);
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
