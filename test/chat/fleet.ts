import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import { type LlmSim, type LlmSimOptions, startLlmFleet } from '../../src/sim/llm/server.js';
import type { TestServer } from '../helpers/server.js';

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

/** Waits (polling) until `condition` holds; fails after `timeoutMs`. */
export async function until(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const started = performance.now();
  while (!(await condition())) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(5);
  }
}

/**
 * The replica lets go of every request within 1 s (its slot is free), and its generation counter
 * then stands still; answers that counter, so a test can subtract where it stood before.
 */
export async function expectEngineStopped(sim: LlmSim): Promise<number> {
  await until(
    () => sim.stats().running === 0 && sim.stats().waiting === 0,
    1000,
    'the replica freeing the slot',
  );
  const stopped = sim.stats().generationTokens;
  await sleep(300);
  expect(sim.stats().generationTokens).toBe(stopped);
  return stopped;
}

/** The newest job of `key`'s organisation, once it is terminal. */
export async function settledJob(kiln: TestServer, key: string, timeoutMs = 5000): Promise<any> {
  let job: any;
  await until(
    async () => {
      job = (await kiln.call('GET', '/v1/jobs?limit=1', { key })).body.data[0];
      return ['completed', 'failed', 'cancelled', 'timeout'].includes(job?.status);
    },
    timeoutMs,
    'the job ending',
  );
  return job;
}
