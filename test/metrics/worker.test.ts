import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool, until } from '../chat/fleet.js';
import { kiln as kilnCli } from '../helpers/cli.js';
import { closedPort } from '../helpers/ports.js';
import { type KilnProcess, spawnKiln } from '../helpers/process.js';
import { sample } from '../helpers/scrape.js';
import { startTestServer, type TestServer, workerEnv } from '../helpers/server.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/*
 * A gateway that only serves HTTP and a `kiln worker` (the built CLI, a process of its own) that runs
 * the jobs, as compose deploys them: what the worker did is counted on its own metrics listener.
 */

const pgCase = storeCases[1] as StoreCase;

describe.skipIf(pgCase.skip)(`kiln worker's metrics listener (metrics.port): ${caseTitle(pgCase)}`, () => {
  let sims: LlmSim[] = [];
  let kiln: TestServer;
  let worker: KilnProcess | undefined;
  let metricsUrl: string;
  let configDir: string;
  let configFile: string;
  let hits = 0;
  const hooks = createServer((request, response) => {
    request.resume().on('end', () => {
      hits++;
      response.writeHead(204).end();
    });
  });

  beforeAll(async () => {
    sims = await simPool(1);
    await new Promise<void>((resolve) => hooks.listen(0, '127.0.0.1', resolve));
    const engines = { e: engine('unique', sims) };
    kiln = await startTestServer(pgCase, {
      engines,
      'jobs.workers': 0,
      'security.allow_hosts': ['127.0.0.1'],
    });
    configDir = mkdtempSync(path.join(tmpdir(), 'kiln-worker-metrics-'));
    configFile = path.join(configDir, 'kiln.yaml');
    writeFileSync(configFile, JSON.stringify({ engines }));
    worker = spawnKiln(
      { ...workerEnv(kiln, configFile), KILN_METRICS_PORT: String(await closedPort()) },
      ['worker'],
      'bin/kiln.js',
    );
    const running = await worker.waitForLine((line) => line.msg === 'kiln worker is running');
    metricsUrl = String(running.metrics);
  }, 60_000);

  afterAll(async () => {
    await worker?.kill();
    await kiln?.close();
    await closeAll(sims);
    await new Promise((resolve) => hooks.close(resolve));
    if (configDir) rmSync(configDir, { recursive: true, force: true });
  });

  const scrape = async (key: string | null = kiln.adminKey) => {
    const response = await fetch(metricsUrl, key ? { headers: { authorization: `Bearer ${key}` } } : {});
    return { status: response.status, text: await response.text() };
  };

  it('a metrics port already in use stops the worker: it says why and exits, holding nothing', async () => {
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    try {
      const port = (busy.address() as AddressInfo).port;
      const result = await kilnCli(['worker'], {
        env: { ...workerEnv(kiln, configFile), KILN_METRICS_PORT: String(port) },
        timeoutMs: 20_000,
      });
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain('EADDRINUSE');
    } finally {
      await new Promise((resolve) => busy.close(resolve));
    }
  });

  it('listens on 127.0.0.1 and, like the gateway, wants a live key', async () => {
    expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect((await scrape(null)).status).toBe(401);
    expect((await scrape('kiln_sk_nope')).status).toBe(401);
    const answer = await scrape();
    expect(answer.status).toBe(200);
    expect(sample(answer.text, 'kiln_process_cpu_seconds_total')).toBeGreaterThan(0);
  });

  it('counts the job, the engine call and the webhook the worker ran', async () => {
    const queued = await kiln.call('POST', '/v1/chat/completions', {
      body: {
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
        mode: 'async',
        webhook: { url: `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/hook` },
      },
    });
    expect(queued.status, JSON.stringify(queued.body)).toBe(202);
    let text = '';
    await until(
      async () => {
        text = (await scrape()).text;
        return sample(text, 'kiln_webhook_deliveries_total{outcome="delivered"}') === 1;
      },
      15_000,
      'the worker counting the webhook delivery',
    );
    expect(hits).toBe(1);
    expect(sample(text, 'kiln_jobs_finished_total{kind="chat",status="completed"}')).toBe(1);
    expect(sample(text, 'kiln_job_duration_seconds_count{kind="chat",status="completed"}')).toBe(1);
    expect(sample(text, 'kiln_engine_time_to_first_token_seconds_count{engine="e",replica="0"}')).toBe(1);
    expect(sample(text, 'kiln_routed_requests_total{class="unique",engine="e",overflow="false"}')).toBe(1);
    // The submission is the gateway's.
    const gateway = (await kiln.call('GET', '/metrics')).body as string;
    expect(sample(gateway, 'kiln_jobs_submitted_total{kind="chat",mode="async"}')).toBe(1);
  });
});
