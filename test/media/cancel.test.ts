import { readdirSync } from 'node:fs';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/** Every file under a directory, recursively. */
const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.join(entry.parentPath, entry.name));

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Cancelling a media job reaches the ComfyUI runner. Kiln may keep 2 prompts on the runner
 * (`max_concurrency: 2`) while the runner — like ComfyUI — executes one at a time, so the second
 * waits in the runner's own queue, where `/interrupt` would not reach it.
 */
describe('cancelling a job on a ComfyUI runner', () => {
  let kiln: TestServer;
  let sim: ComfySim;
  let image: string;
  const queue = async () =>
    (await (await fetch(`${sim.url}/queue`)).json()) as {
      queue_running: unknown[][];
      queue_pending: unknown[][];
    };
  const history = async (promptId: string) =>
    (await (await fetch(`${sim.url}/history/${promptId}`)).json()) as Record<string, any>;
  const status = async (id: string) => (await kiln.call('GET', `/v1/jobs/${id}`)).body;
  const settled = (id: string) =>
    until(`job ${id} to end`, async () => {
      const body = await status(id);
      return ['completed', 'failed', 'cancelled', 'timeout'].includes(body.status) ? body : undefined;
    });
  const submit = async (prompt: string) => {
    const accepted = await kiln.call('POST', '/v1/videos/transitions', {
      body: { start_image: image, size: '512x512', duration_seconds: 1, prompt },
    });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);
    return accepted.body.id as string;
  };

  beforeAll(async () => {
    // 10 sampler steps of 150 ms: a prompt runs for 1.5 s before its clip is rendered.
    sim = await startComfySim({ models: ['ltx-video'], stepMs: 150, steps: 10 });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      runners: { gpu: { url: sim.url, models: ['ltx-video'], max_concurrency: 2 } },
      'jobs.poll_interval_ms': 50,
    });
    const png = await sharp({ create: { width: 512, height: 512, channels: 3, background: '#336699' } })
      .png()
      .toBuffer();
    image = `data:image/png;base64,${png.toString('base64')}`;
  }, 60_000);
  afterAll(async () => {
    await kiln?.close();
    await sim?.close();
  });

  it('a job queued on the runner is deleted from its queue: it never runs and writes no file', async () => {
    const first = await submit('the one that runs');
    await until('the first prompt to run', async () =>
      (await queue()).queue_running.length === 1 ? true : undefined,
    );
    const second = await submit('the one cancelled while queued');
    const queued = await until('the second prompt to wait on the runner', async () => {
      const { queue_pending } = await queue();
      return queue_pending.length === 1 ? String(queue_pending[0]?.[1]) : undefined;
    });
    expect(sim.stats()).toMatchObject({ running: 1, queued: 1 });

    const cancelled = await kiln.call('POST', `/v1/jobs/${second}/cancel`);
    expect(cancelled.body.status).toBe('cancelled');
    // Gone from the runner's queue (ComfyUI's POST /queue {delete}), the first one still running.
    await until('the runner to drop the prompt', async () =>
      (await queue()).queue_pending.length === 0 ? true : undefined,
    );
    expect(sim.stats()).toMatchObject({ running: 1, queued: 0 });

    const done = await settled(first);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    // The runner idles afterwards: the cancelled prompt was not run later.
    await new Promise((r) => setTimeout(r, 500));
    expect(await history(queued)).toEqual({});
    expect(sim.stats()).toMatchObject({ prompts: 2, running: 0, queued: 0, interrupted: 0 });
    expect(await status(second)).toMatchObject({ status: 'cancelled' });
    expect((await status(second)).result).toBeUndefined();
    // One clip on the runner and one stored file in Kiln: the first job's.
    expect(filesUnder(sim.outputDir)).toHaveLength(1);
    expect(filesUnder(path.join(kiln.dataDir, 'files'))).toHaveLength(1);
  }, 60_000);

  it('a job running on the runner is interrupted there, by its prompt id', async () => {
    const before = sim.stats();
    const outputs = filesUnder(sim.outputDir).length;
    const job = await submit('the one interrupted');
    const running = await until('the prompt to run', async () => {
      const { queue_running } = await queue();
      return queue_running.length === 1 ? String(queue_running[0]?.[1]) : undefined;
    });
    await kiln.call('POST', `/v1/jobs/${job}/cancel`);
    const entry = await until(
      'the runner to record the interrupt',
      async () => (await history(running))[running],
    );
    expect(entry.status).toMatchObject({ status_str: 'error', completed: false });
    expect(entry.status.messages.at(-1)[0]).toBe('execution_interrupted');
    expect(sim.stats()).toMatchObject({ prompts: before.prompts + 1, interrupted: before.interrupted + 1 });
    expect(filesUnder(sim.outputDir)).toHaveLength(outputs);
    expect(await status(job)).toMatchObject({ status: 'cancelled' });
  }, 60_000);
});
