import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { KilnError } from '../errors.js';
import { routeCounts } from '../router/metrics.js';

const NoQuery = Type.Object({}, { additionalProperties: false });

/**
 * `GET /admin/v1/fleet`: the engine pools, their replicas and the ComfyUI runners as this gateway
 * sees them now (admin keys only). Replicas are named by engine and index, never by address.
 */
export function fleetRoutes(app: FastifyInstance, deps: AppDeps): void {
  app.get('/admin/v1/fleet', { schema: { querystring: NoQuery } }, async (request) => {
    if (request.auth.role !== 'admin') throw new KilnError('forbidden', 'the fleet view needs an admin key');
    const { fleet, config } = deps.runtime.router();
    const counts = routeCounts();
    const pools = Object.entries(config.engines).map(([name, engine]) => ({
      name,
      adapter: engine.adapter,
      overflow: engine.overflow,
      models: Object.keys(engine.models),
      requests: counts.routed.get(name)?.requests ?? 0,
      overflow_requests: counts.routed.get(name)?.overflow ?? 0,
      replicas: fleet.replicas
        .filter((replica) => replica.engine === name)
        .map((replica) => {
          const cached = counts.cached.get(`${name}/${replica.index}`);
          return {
            index: replica.index,
            healthy: replica.healthy,
            available: replica.available,
            in_flight: replica.inFlight,
            max_concurrency: replica.maxConcurrency,
            engine_load: replica.engineLoad ?? null,
            context_tokens: replica.contextTokens ?? null,
            vision: replica.vision ?? null,
            prompt_tokens: cached?.prompt ?? 0,
            cached_tokens: cached?.reported ?? 0,
          };
        }),
    }));
    const runners = deps.runtime.runners.runners.map((runner) => ({
      name: runner.name,
      models: runner.config.models,
      available: runner.healthy,
      in_flight: runner.inFlight,
      max_concurrency: runner.config.max_concurrency,
    }));
    return { object: 'fleet', pools, runners };
  });
}
