import { afterEach, describe, expect, it } from 'vitest';
import { killAll, spawnKiln } from '../helpers/process.js';

const SCRIPT = 'test/sim/sim-cli.ts';

describe('kiln sim llm', () => {
  afterEach(async () => killAll());

  it('prints one URL per replica, serves on each, and exits 0 on SIGTERM', async () => {
    const sim = spawnKiln(
      {},
      [
        ...['sim', 'llm', '--port', '0', '--replicas', '2', '--model', 'rehearsal'],
        ...['--decode-ms-per-token', '1', '--kv-blocks', '64', '--block-tokens', '32'],
      ],
      SCRIPT,
    );
    await sim.waitForLine(() => sim.lines.length >= 2);
    const urls = sim.lines.map((line) => String(line.text));
    expect(urls).toHaveLength(2);
    for (const url of urls) expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(new Set(urls).size).toBe(2);

    for (const url of urls) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({
          model: 'rehearsal',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 3,
        }),
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).usage.completion_tokens).toBe(3);
    }
    expect(sim.output()).toMatch(/2 replica\(s\) serving rehearsal/);
    // The KV flags reach each engine: a router reads them from vLLM's cache_config_info.
    const metrics = await (await fetch(`${urls[1]}/metrics`)).text();
    expect(metrics.split('\n')).toContain(
      'vllm:cache_config_info{block_size="32",num_gpu_blocks="64",model_name="rehearsal"} 1',
    );

    sim.child.kill('SIGTERM');
    expect(await sim.exited).toEqual({ code: 0, signal: null });
    await expect(fetch(`${urls[0]}/health`)).rejects.toThrow();
  });

  it("--flavor llama.cpp serves llama-server's routes and shapes", async () => {
    const sim = spawnKiln(
      {},
      ['sim', 'llm', '--port', '0', '--flavor', 'llama.cpp', '--model', 'tiny'],
      SCRIPT,
    );
    await sim.waitForLine(() => sim.lines.length >= 1);
    const url = String(sim.lines[0]?.text);
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'ok' });
    expect(await (await fetch(`${url}/props`)).json()).toMatchObject({ model_alias: 'tiny', total_slots: 8 });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    expect(await res.json()).toMatchObject({
      system_fingerprint: expect.stringMatching(/^b11669-/),
      timings: { predicted_n: 2 },
    });
    expect(sim.output()).toMatch(/1 replica\(s\) serving tiny as llama\.cpp/);
    sim.child.kill('SIGTERM');
    expect(await sim.exited).toEqual({ code: 0, signal: null });
  });

  it('refuses a bad option value with a message and a non-zero exit', async () => {
    const sim = spawnKiln({}, ['sim', 'llm', '--replicas', '0'], SCRIPT);
    const exit = await sim.exited;
    expect(exit.code).not.toBe(0);
    expect(sim.output()).toMatch(/--replicas.*expected a whole number ≥ 1/);
    const flavor = spawnKiln({}, ['sim', 'llm', '--flavor', 'sglang'], SCRIPT);
    expect((await flavor.exited).code).not.toBe(0);
    expect(flavor.output()).toMatch(/--flavor.*expected vllm or llama\.cpp/);
  });
});
