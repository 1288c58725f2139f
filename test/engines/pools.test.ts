import { afterAll, describe, expect, it } from 'vitest';
import { OpenAICompatibleAdapter } from '../../src/engines/openai/adapter.js';
import type { ReplicaTarget } from '../../src/engines/types.js';
import { startLlmSim } from '../../src/sim/llm/server.js';

describe('connection pools', () => {
  const adapter = new OpenAICompatibleAdapter();
  afterAll(() => adapter.close());

  it('two engine entries on one server keep their own concurrency', async () => {
    const sim = await startLlmSim({ model: 'm', decodeMsPerToken: 20, maxSequences: 8 });
    try {
      const target = (label: string, maxConcurrency: number): ReplicaTarget => ({
        url: sim.url,
        label,
        apiKey: undefined,
        timeoutMs: 10_000,
        connectTimeoutMs: 1000,
        maxConcurrency,
        healthPath: '/health',
      });
      const narrow = target('narrow replica 0', 1);
      const wide = target('wide replica 0', 4);
      // The narrow entry is used first, so a pool shared by origin would have its single connection.
      await adapter.chat(narrow, {
        body: { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] },
        signal: AbortSignal.timeout(5000),
      });
      let peak = 0;
      const watch = setInterval(() => {
        peak = Math.max(peak, sim.stats().running);
      }, 5);
      await Promise.all(
        Array.from({ length: 4 }, () =>
          adapter.chat(wide, {
            body: { model: 'm', max_tokens: 20, messages: [{ role: 'user', content: 'hello' }] },
            signal: AbortSignal.timeout(10_000),
          }),
        ),
      );
      clearInterval(watch);
      expect(peak).toBe(4);
    } finally {
      await sim.close();
    }
  });
});
