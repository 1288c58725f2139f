import type { Choice, ReplicaView, RoutingPolicy } from '../policy.js';

/** Fewest requests in flight; ties rotate so equal replicas share the load. Blind to caches. */
export class LeastLoadPolicy implements RoutingPolicy {
  readonly name = 'least-load';
  #turn = 0;

  choose<R extends ReplicaView>(candidates: readonly R[]): Choice<R> {
    const offset = this.#turn++;
    let best = candidates[offset % candidates.length] as R;
    for (let i = 1; i < candidates.length; i++) {
      const replica = candidates[(i + offset) % candidates.length] as R;
      if (replica.inFlight < best.inFlight) best = replica;
    }
    return { replica: best, predictedCachedTokens: 0 };
  }
}

/** Each replica in turn, whatever its load or cache. */
export class RoundRobinPolicy implements RoutingPolicy {
  readonly name = 'round-robin';
  #turn = 0;

  choose<R extends ReplicaView>(candidates: readonly R[]): Choice<R> {
    return { replica: candidates[this.#turn++ % candidates.length] as R, predictedCachedTokens: 0 };
  }
}
