import { type LlmSim, type LlmSimOptions, startLlmFleet } from '../../src/sim/llm/server.js';

/** Simulated replicas for chat tests, all serving `sim-model`, which Kiln calls `m`. */
export async function simPool(replicas: number, options: LlmSimOptions = {}): Promise<LlmSim[]> {
  return startLlmFleet(replicas, {
    model: 'sim-model',
    decodeMsPerToken: 1,
    prefillMsPerToken: 0.001,
    ...options,
  });
}

export function engine(serves: string, sims: LlmSim[], extra: Record<string, unknown> = {}) {
  return { serves, replicas: sims.map((s) => s.url), models: { m: 'sim-model' }, ...extra };
}

export async function closeAll(sims: LlmSim[]): Promise<void> {
  await Promise.all(sims.map((s) => s.close()));
}
