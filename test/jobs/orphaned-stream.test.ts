import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import type { JobRow } from '../../src/store/types.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { killAll, processWorld, startServerProcess, waitUntil } from '../helpers/process.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Real processes, really killed: a stream dies with the gateway that ran it and held its request.
 * The next gateway on the store ends its job `cancelled` rather than run it again for nobody, while
 * an async job cut by the same kill still runs again to completion.
 */

afterAll(async () => {
  await killAll();
});

/** Waits for the stream's job to end, cancelled or (run again) completed. */
const streamEnds = (row: (id: string) => Promise<JobRow | undefined>, id: string) =>
  waitUntil(async () => ['cancelled', 'completed'].includes((await row(id))?.status ?? ''), {
    timeoutMs: 20_000,
    intervalMs: 50,
    describe: async () => `the stream's job to end (${(await row(id))?.status})`,
  });

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a stream whose gateway is killed: ${caseTitle(storeCase)}`, () => {
    let sims: LlmSim[];
    let world: ReturnType<typeof processWorld>;
    let env: Record<string, string>;
    beforeEach(async () => {
      sims = await simPool(1, { decodeMsPerToken: 30 });
      world = processWorld(storeCase, 'kiln-orphaned-stream-');
      const config = path.join(world.dataDir, 'kiln.yaml');
      writeFileSync(config, JSON.stringify({ engines: { pool: engine('unique', sims) } }));
      env = world.env({ KILN_CONFIG: config });
    });
    afterEach(async () => {
      await world.cleanup();
      await closeAll(sims);
    });

    it('is cancelled by the next gateway, not streamed again for nobody; an async job is run again', async () => {
      const sim = sims[0] as LlmSim;
      const first = await startServerProcess(env);
      const key = world.adminKey();
      const body = {
        model: 'm',
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
        max_tokens: 60,
      };
      const post = (extra: Record<string, unknown>, signal?: AbortSignal) =>
        fetch(`${first.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ ...body, ...extra }),
          ...(signal ? { signal } : {}),
        });
      const queued = (await (await post({ mode: 'async' })).json()) as { id: string };
      const abort = new AbortController();
      const stream = await post({ stream: true }, abort.signal);
      expect(stream.status).toBe(200);
      const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
      const opening = new TextDecoder().decode((await reader.read()).value);
      const streamed = /"id":"chatcmpl-([0-9a-f-]{36})"/.exec(opening)?.[1] as string;
      expect(streamed).toBeDefined();
      await waitUntil(() => sim.stats().running === 2 || undefined, {
        timeoutMs: 10_000,
        intervalMs: 5,
        describe: () => `both jobs generating (${JSON.stringify(sim.stats())})`,
      });
      await first.kill('SIGKILL');
      abort.abort();
      const row = (id: string) => world.store().driver.get<JobRow>('SELECT * FROM jobs WHERE id = ?', [id]);
      expect(await row(streamed)).toMatchObject({ mode: 'stream', status: 'running', attempts: 1 });

      await startServerProcess(env);
      const asyncId = queued.id.replace(/^chatcmpl-/, '');
      await streamEnds(row, streamed);
      expect(await row(streamed)).toMatchObject({
        status: 'cancelled',
        attempts: 1,
        error_code: 'cancelled',
        error_message: expect.stringContaining('the gateway process that ran it and held its stream stopped'),
        lease_owner: null,
      });
      await waitUntil(async () => (await row(asyncId))?.status === 'completed' || undefined, {
        timeoutMs: 20_000,
        intervalMs: 50,
        describe: async () => `the async job to complete (${(await row(asyncId))?.status})`,
      });
      expect(await row(asyncId)).toMatchObject({ attempts: 2 });
      // Two requests before the kill, and one more: the async job's second run, not the stream's.
      expect(sim.stats().requests).toBe(3);
    }, 60_000);

    it('a stream that waited in the queue, then ran in the gateway holding it, is cancelled too', async () => {
      const sim = sims[0] as LlmSim;
      // One worker, busy with an async job: the stream is queued, then claimed by that worker.
      const first = await startServerProcess({ ...env, KILN_JOBS_WORKERS: '1' });
      const key = world.adminKey();
      const post = (extra: Record<string, unknown>, signal?: AbortSignal) =>
        fetch(`${first.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'm',
            messages: [{ role: 'user', content: 'Tell me a long story.' }],
            max_tokens: 20,
            ...extra,
          }),
          ...(signal ? { signal } : {}),
        });
      expect((await post({ mode: 'async' })).status).toBe(202);
      // The worker has taken it: the stream finds no free worker and is queued.
      await waitUntil(() => sim.stats().running === 1 || undefined, {
        timeoutMs: 10_000,
        intervalMs: 5,
        describe: () => `the async job generating (${JSON.stringify(sim.stats())})`,
      });
      const abort = new AbortController();
      const stream = await post({ stream: true, max_tokens: 200 }, abort.signal);
      expect(stream.status).toBe(200);
      const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
      const opening = new TextDecoder().decode((await reader.read()).value);
      const streamed = /"id":"chatcmpl-([0-9a-f-]{36})"/.exec(opening)?.[1] as string;
      const row = (id: string) => world.store().driver.get<JobRow>('SELECT * FROM jobs WHERE id = ?', [id]);
      const before = await row(streamed);
      // It waited: it started after it was created, on the process's one worker.
      expect(before).toMatchObject({ mode: 'stream', status: 'running', attempts: 1 });
      expect(before?.started_at).toBeGreaterThan(before?.created_at as number);
      await first.kill('SIGKILL');
      abort.abort();
      const requests = sim.stats().requests;

      await startServerProcess(env);
      await streamEnds(row, streamed);
      expect(await row(streamed)).toMatchObject({
        status: 'cancelled',
        attempts: 1,
        error_message: expect.stringContaining('the gateway process that ran it and held its stream stopped'),
      });
      // Not run again for nobody.
      expect(sim.stats().requests).toBe(requests);
    }, 60_000);
  });
}
