import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * ComfyUI runners are probed like chat replicas: a runner that stops answering turns its models
 * `ready: false` and its new jobs fail fast; it comes back when it answers again; a runner added
 * to the configuration serves after a reload, without a restart.
 */
describe('runner health and reload', () => {
  let kiln: TestServer;
  let first: ComfySim;
  let second: ComfySim | undefined;
  let dir: string;
  let configFile: string;
  let key: string;

  const ready = async (model: string) =>
    (await kiln.call('GET', `/v1/models/${model}`, { key })).body.ready as boolean;
  const image = async (model: string) => {
    const submitted = await kiln.call('POST', '/v1/images/generations', {
      key,
      body: { model, prompt: 'a kiln', mode: 'async' },
    });
    expect(submitted.status).toBe(202);
    return waitUntil(
      async () => {
        const poll = await kiln.call('GET', `/v1/jobs/${submitted.body.id}`, { key });
        return ['completed', 'failed'].includes(poll.body.status) ? poll.body : undefined;
      },
      { timeoutMs: 15_000, describe: () => `image job ${submitted.body.id} to end` },
    );
  };
  const writeRunners = (runners: Record<string, { url: string; models: string[] }>) =>
    writeFileSync(configFile, JSON.stringify({ runners }));

  beforeAll(async () => {
    first = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2 });
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-runners-'));
    configFile = path.join(dir, 'kiln.yaml');
    writeRunners({ first: { url: first.url, models: ['sdxl'] } });
    kiln = await startTestServer(
      storeCases[0] as (typeof storeCases)[0],
      { 'jobs.poll_interval_ms': 50 },
      { configFile },
    );
    key = await kiln.key('runners', { admin: true });
  }, 30_000);
  afterAll(async () => {
    await kiln?.close();
    await first?.close();
    await second?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a runner that stops answering turns its model not ready within 10 s, and its jobs fail fast; back when it answers', async () => {
    expect(await ready('sdxl')).toBe(true);
    expect((await image('sdxl')).status).toBe('completed');

    const port = first.port;
    await first.close();
    const downAt = Date.now();
    await waitUntil(async () => ((await ready('sdxl')) === false ? true : undefined), {
      timeoutMs: 10_000,
      describe: () => 'sdxl to be not ready',
    });
    expect(Date.now() - downAt).toBeLessThan(10_000);
    const fleet = await kiln.call('GET', '/admin/v1/fleet', { key });
    expect(fleet.body.runners).toEqual([expect.objectContaining({ name: 'first', available: false })]);

    const started = Date.now();
    const failed = await image('sdxl');
    expect(failed).toMatchObject({ status: 'failed', code: 'engine-unavailable' });
    expect(failed.message).toContain('first');
    expect(Date.now() - started).toBeLessThan(5_000);

    first = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2, port });
    await waitUntil(async () => ((await ready('sdxl')) ? true : undefined), {
      timeoutMs: 10_000,
      describe: () => 'sdxl to be ready again',
    });
    expect((await image('sdxl')).status).toBe('completed');
  }, 40_000);

  it('a runner added to the configuration serves its model after POST /admin/reload, without a restart', async () => {
    expect(await ready('ltx-video')).toBe(false);
    second = await startComfySim({ models: ['ltx-video'], stepMs: 1, steps: 2 });
    writeRunners({
      first: { url: first.url, models: ['sdxl'] },
      second: { url: second.url, models: ['ltx-video'] },
    });
    const reloaded = await kiln.call('POST', '/admin/reload', { key });
    expect(reloaded.status).toBe(200);
    await waitUntil(async () => ((await ready('ltx-video')) ? true : undefined), {
      timeoutMs: 10_000,
      describe: () => 'ltx-video to be ready',
    });
    const fleet = await kiln.call('GET', '/admin/v1/fleet', { key });
    expect(fleet.body.runners.map((r: { name: string }) => r.name)).toEqual(['first', 'second']);

    // An empty file (a save in progress, a truncation) is refused, and the running fleet stays.
    for (const nothing of ['  \n', '# runners: being rewritten\n', '---\n']) {
      writeFileSync(configFile, nothing);
      const empty = await kiln.call('POST', '/admin/reload', { key });
      expect([empty.status, empty.body.error.code], nothing).toEqual([400, 'validation-failed']);
      expect(empty.body.error.details[0].message, nothing).toContain('holds no settings');
    }
    expect((await kiln.call('GET', '/admin/v1/fleet', { key })).body.runners).toHaveLength(2);

    // And removed again: its model is no longer ready, the other runner serves on.
    writeRunners({ first: { url: first.url, models: ['sdxl'] } });
    expect((await kiln.call('POST', '/admin/reload', { key })).status).toBe(200);
    expect(await ready('ltx-video')).toBe(false);
    expect((await image('sdxl')).status).toBe('completed');
  }, 40_000);
});
