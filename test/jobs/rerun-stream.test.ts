import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool, until } from '../chat/fleet.js';
import { type KilnProcess, killAll, startWorkerProcess } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * A stream whose job a worker in another process runs: that worker is killed after the answer
 * began, and the job, its lease lost, runs again on another. The caller must not get the second
 * run's answer joined to the first's: its stream ends as a failure after output does, and the job
 * nobody can read any more is cancelled.
 */

const postgres = storeCases[1] as (typeof storeCases)[number];

describe.skipIf(postgres.skip)(`a stream whose worker dies mid-answer: ${caseTitle(postgres)}`, () => {
  let gateway: TestServer;
  let sims: LlmSim[];
  let dir: string;
  let workerEnv: Record<string, string>;

  beforeAll(async () => {
    sims = await simPool(1, { decodeMsPerToken: 30 });
    const fleet = { engines: { pool: engine('unique', sims) } };
    gateway = await startTestServer(postgres, {
      ...fleet,
      'jobs.workers': 0,
      'jobs.lease_seconds': 2,
      'jobs.poll_interval_ms': 100,
    });
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-rerun-'));
    const config = path.join(dir, 'kiln.yaml');
    writeFileSync(config, JSON.stringify(fleet));
    workerEnv = {
      KILN_CONFIG: config,
      KILN_DATA_DIR: dir,
      KILN_STORE_URL: gateway.server.runtime.config.store.url,
      KILN_STORE_SCHEMA: gateway.server.runtime.config.store.schema,
      KILN_JOBS_WORKERS: '2',
      KILN_JOBS_LEASE_SECONDS: '2',
      KILN_JOBS_POLL_INTERVAL_MS: '100',
    };
  });
  afterAll(async () => {
    await killAll();
    await gateway?.close();
    await closeAll(sims ?? []);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('ends with an error event, not the next run’s answer after the first’s, and the job is cancelled', async () => {
    const first: KilnProcess = await startWorkerProcess(workerEnv);
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gateway.adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        max_tokens: 200,
        messages: [{ role: 'user', content: 'Tell me about kilns.' }],
      }),
    });
    expect(response.status).toBe(200);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    const read = async () => {
      const { value, done } = await reader.read();
      if (value) text += decoder.decode(value, { stream: true });
      return done;
    };
    while ((text.match(/^data: /gm) ?? []).length < 10) await read();

    // The worker dies mid-answer; another takes the job once its lease has run out.
    await first.kill('SIGKILL');
    await startWorkerProcess(workerEnv);
    while (!(await read()));

    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    expect(events).not.toContain('[DONE]');
    const last = JSON.parse(events.at(-1) as string);
    expect(last.error).toMatchObject({ code: 'worker-lost' });
    // One answer's chunks, from one run: a single role chunk, no text started over.
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks.filter((c) => c.choices[0]?.delta?.role)).toHaveLength(1);
    expect(chunks.length).toBeLessThan(200);

    const id = (chunks[0].id as string).replace('chatcmpl-', '');
    await until(
      async () => (await gateway.call('GET', `/api/v1/jobs/${id}`)).body.status === 'cancelled',
      10_000,
      'the job cancelled',
    );
  });
});
