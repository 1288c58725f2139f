/**
 * Replica choice: the contract every routing policy implements. A policy sees the candidates (the
 * available replicas of one pool that have room) and the request as the router sees it, and picks
 * one. The fleet keeps each replica's load; the policy keeps whatever it learns about caches.
 */

/** What a policy may read of a replica. */
export interface ReplicaView {
  /** Stable across reloads and across gateway processes: the replica's base URL. */
  readonly url: string;
  readonly engine: string;
  readonly index: number;
  /** Requests this process has in flight on the replica. */
  readonly inFlight: number;
  /**
   * The load the replica's engine reports (running + waiting requests, all gateways together), from
   * its last metrics scrape; undefined when the engine exposes none or the scrape is stale.
   */
  readonly engineLoad: number | undefined;
  /** Prompt tokens routed here whose prefill has not finished yet (this process's view). */
  readonly pendingPrefillTokens: number;
  /** The replica's KV cache capacity in tokens: configured, discovered from the engine, or a default. */
  readonly kvCapacityTokens: number;
}

/** A prompt as the router sees it. */
export interface RoutingRequest {
  /** The rendered conversation (every message, the last one included), in the router's own rendering. */
  readonly text: string;
  /** Hash chain of the text's whole blocks of `blockChars` characters: block i covers everything up to its end. */
  readonly blocks: readonly string[];
  readonly blockChars: number;
  /** The prompt's size in tokens, as well as the router knows it. */
  readonly promptTokens: number;
  /** Characters per token for this request's model (calibrated from the engines' usage). */
  readonly charsPerToken: number;
  /** Whose cache the prompt may be found in: its organisation's scope (it seeds `blocks`), or ''. */
  readonly scope: string;
}

/** A policy's pick, with the prompt tokens it expects the replica to find cached. */
export interface Choice<R extends ReplicaView = ReplicaView> {
  replica: R;
  predictedCachedTokens: number;
  /** Handed back to `observe` when the request ends: what the policy needs to learn from the outcome. */
  memo?: unknown;
}

/** How the request ended on the replica, as far as the policy can learn from it. */
export interface Outcome {
  ok: boolean;
  /** Whether the engine sent any of the answer: it had computed the prompt by then. */
  prefilled?: boolean;
  /** `usage.prompt_tokens` as the engine reported it. */
  promptTokens?: number;
  /** `usage.prompt_tokens_details.cached_tokens` as the engine reported it. */
  cachedTokens?: number;
}

export interface RoutingPolicy {
  readonly name: string;
  /** Picks one of `candidates` (never empty); may record that the replica will now hold the prompt. */
  choose<R extends ReplicaView>(candidates: readonly R[], request: RoutingRequest): Choice<R>;
  /** Learns from how a request it routed ended. */
  observe?(replica: ReplicaView, request: RoutingRequest, choice: Choice, outcome: Outcome): void;
  /** The replica lost its cache (restart, or back from being down). */
  forget?(replica: ReplicaView): void;
}
