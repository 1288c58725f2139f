import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FlavorName, LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, expectEngineStopped, settledJob, simPool, until } from './fleet.js';

/**
 * A cancelled chat job stops the engine's generation, whatever the mode: measured on the simulated
 * replica's own counters. The replica models an engine that notices a closed stream and ignores a
 * closed non-streaming request (llama.cpp, recorded), which Kiln therefore always calls streaming.
 */

describe.each<FlavorName>(['vllm', 'llama.cpp'])('cancellation reaches a %s engine', (flavor) => {
  let kiln: TestServer;
  let sim: LlmSim;
  // A long prompt prefills slowly (about 2 s); output decodes at 10 ms a token, 300 in 3 s.
  const longPrompt = 'clay '.repeat(2000);
  const MAX = 300;

  beforeAll(async () => {
    [sim] = (await simPool(1, { flavor, prefillMsPerToken: 1, decodeMsPerToken: 10 })) as [LlmSim];
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { pool: engine('unique', [sim]) },
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sim ? [sim] : []);
  });

  /** A key of a new organisation, so that its job list holds only the test's job. */
  const freshKey = (name: string) => kiln.key(`${name}-${flavor}-${Math.random()}`);

  const chat = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${kiln.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: MAX, ...body }),
      ...(signal ? { signal } : {}),
    });

  const settled = (key: string) => settledJob(kiln, key);

  /** The tokens the replica generated since `before`, once it has stopped generating. */
  const expectStopped = async (before: number) => (await expectEngineStopped(sim)) - before;

  /** Waits for the replica to be idle, so that each test starts on a quiet engine. */
  const idle = () => until(() => sim.stats().running === 0, 10_000, 'the replica going idle');

  it('a stream dropped as soon as its job exists, before its first token, ends cancelled; nothing is generated', async () => {
    await idle();
    const key = await freshKey('stream-early');
    const before = sim.stats().generationTokens;
    const leaving = new AbortController();
    const answer = chat(
      key,
      { stream: true, messages: [{ role: 'user', content: longPrompt }] },
      leaving.signal,
    );
    answer.catch(() => undefined);
    // Not a fixed 20 ms: on a loaded machine the gateway may not have read the request by then, and
    // a request dropped before it is read makes no job at all. The prefill takes about 2 s.
    await until(
      async () => (await kiln.call('GET', '/v1/jobs?limit=1', { key })).body.data.length === 1,
      5000,
      'the job existing',
    );
    leaving.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
    expect((await settled(key)).status).toBe('cancelled');
    expect(await expectStopped(before)).toBe(0);
  });

  it('a stream dropped mid-prefill: the replica stops prefilling at once, not 2 s later', async () => {
    await idle();
    const key = await freshKey('stream-prefill');
    const before = sim.stats();
    const leaving = new AbortController();
    const answer = chat(
      key,
      { stream: true, messages: [{ role: 'user', content: longPrompt }] },
      leaving.signal,
    );
    answer.catch(() => undefined);
    // The request reached the engine and is prefilling (a 2 s prefill, no token yet).
    await until(
      () => sim.stats().requests > before.requests && sim.stats().running === 1,
      2000,
      'the prefill',
    );
    expect(sim.stats().generationTokens).toBe(before.generationTokens);
    leaving.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
    expect(await expectStopped(before.generationTokens)).toBe(0);
    expect((await settled(key)).status).toBe('cancelled');
  });

  it('a sync client that disconnects mid-generation cancels its job, and the replica stops', async () => {
    await idle();
    const key = await freshKey('sync');
    const before = sim.stats().generationTokens;
    const leaving = new AbortController();
    const answer = chat(
      key,
      { messages: [{ role: 'user', content: 'Tell me a long story.' }] },
      leaving.signal,
    );
    answer.catch(() => undefined);
    await until(() => sim.stats().generationTokens - before >= 20, 5000, 'generation under way');
    leaving.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
    const generated = await expectStopped(before);
    expect(generated).toBeGreaterThanOrEqual(20);
    expect(generated).toBeLessThan(MAX / 2);
    const job = await settled(key);
    expect(job.status).toBe('cancelled');
    // Where it ran is kept, though its run never ended by itself.
    const details = await kiln.call('GET', `/api/v1/jobs/${job.id}/details`, { key });
    expect(details.body.route).toMatchObject({ engine: 'pool', replica: 0 });
    expect(details.body.route).not.toHaveProperty('url');
  });

  it('an async job cancelled mid-generation with POST /v1/jobs/{id}/cancel stops the replica', async () => {
    await idle();
    const key = await freshKey('async');
    const before = sim.stats().generationTokens;
    const accepted = (await (
      await chat(key, { mode: 'async', messages: [{ role: 'user', content: 'Tell me a long story.' }] })
    ).json()) as { id: string };
    expect(accepted).toMatchObject({ object: 'chat.completion.async', status: 'queued' });
    await until(() => sim.stats().generationTokens - before >= 20, 5000, 'generation under way');
    // As many clients send it: a JSON content type and no body.
    const cancel = await kiln.call('POST', `/v1/jobs/${accepted.id}/cancel`, {
      key,
      headers: { 'content-type': 'application/json' },
    });
    expect(cancel.status).toBe(200);
    expect(cancel.body).toMatchObject({ id: accepted.id, status: 'cancelled' });
    const generated = await expectStopped(before);
    expect(generated).toBeGreaterThanOrEqual(20);
    expect(generated).toBeLessThan(MAX / 2);
    expect((await kiln.call('GET', `/v1/jobs/${accepted.id}`, { key })).body.status).toBe('cancelled');
  });

  it('by contrast, a non-streaming request sent straight to the replica and abandoned generates every token', async () => {
    await idle();
    const before = sim.stats().generationTokens;
    const tokens = 100;
    const leaving = new AbortController();
    const answer = fetch(`${sim.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({
        model: 'sim-model',
        max_tokens: tokens,
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
      }),
      signal: leaving.signal,
    });
    answer.catch(() => undefined);
    await until(() => sim.stats().generationTokens - before >= 20, 5000, 'generation under way');
    leaving.abort();
    await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
    expect(sim.stats().generationTokens - before).toBeLessThan(tokens);
    // The engine never noticed: all 100 tokens, about 1 s of decode, then the slot is free.
    await until(() => sim.stats().generationTokens - before === tokens, 5000, 'every token generated');
    await idle();
    expect(sim.stats().generationTokens - before).toBe(tokens);
  });
});
