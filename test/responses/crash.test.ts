import { writeFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import type { JobRow } from '../../src/store/types.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { expectValidResponse } from '../helpers/openai-schema.js';
import { killAll, processWorld, startServerProcess, waitUntil } from '../helpers/process.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * Real processes, really killed: a background response whose gateway dies mid-generation is run
 * again by the next gateway on the same store, completes under the same id, and is billed once.
 */

/** The simulated model's answer ends at its first full stop, as a model that finishes its answer. */
const PERSONA = 'explainer';
/**
 * The simulator's answer to this prompt (deterministic: model, prompt and seed decide it) runs to
 * about 45 tokens before its first full stop: at 30 ms a token, over a second of generation to
 * kill the gateway in. The test checks that the engine was still generating when it did.
 */
const PROMPT = 'Explain the cooling curve, step by step.';
const DECODE_MS_PER_TOKEN = 30;

interface LedgerRow {
  job_id: string;
  kind: string;
  status: string;
  input_units: number | string;
  output_units: number | string;
}

/** One scenario's world, its data dir holding the fleet's config. */
function scenario(storeCase: StoreCase, sims: LlmSim[]) {
  const world = processWorld(storeCase, 'kiln-response-crash-');
  const config = path.join(world.dataDir, 'kiln.yaml');
  writeFileSync(
    config,
    JSON.stringify({
      engines: { pool: engine('unique', sims) },
      personas: { [PERSONA]: { model: 'm', defaults: { stop: ['.'] } } },
    }),
  );
  return { ...world, env: world.env({ KILN_CONFIG: config }) };
}

const openai = (url: string, apiKey: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });

afterAll(async () => {
  await killAll();
});

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`a background response survives kill -9: ${caseTitle(storeCase)}`, () => {
    let sims: LlmSim[];
    let world: ReturnType<typeof scenario>;
    beforeEach(async () => {
      sims = await simPool(1, { decodeMsPerToken: DECODE_MS_PER_TOKEN });
      world = scenario(storeCase, sims);
    });
    afterEach(async () => {
      await world.cleanup();
      await closeAll(sims);
    });

    it('the gateway killed mid-generation, the next one completes it under the same id, billed once', async () => {
      const sim = sims[0] as LlmSim;
      const t0 = Date.now();
      const first = await startServerProcess(world.env);
      const adminKey = world.adminKey();
      const before = openai(first.url, adminKey);

      const created = await before.responses.create({
        model: PERSONA,
        input: PROMPT,
        max_output_tokens: 100,
        background: true,
      });
      expect(created.id).toMatch(/^resp_/);
      expect(created.background).toBe(true);
      expect(['queued', 'in_progress']).toContain(created.status);
      const uuid = created.id.slice('resp_'.length);

      // Kill once the response is in progress and the engine has produced some of its answer.
      await waitUntil(async () => (await before.responses.retrieve(created.id)).status === 'in_progress', {
        timeoutMs: 10_000,
        intervalMs: 20,
        describe: () => `${created.id} in_progress`,
      });
      await waitUntil(() => sim.stats().generationTokens >= 5, {
        timeoutMs: 10_000,
        intervalMs: 5,
        describe: () => `the engine generating (${JSON.stringify(sim.stats())})`,
      });
      const atKill = sim.stats();
      await first.kill('SIGKILL');
      const killedAt = Date.now();
      // The kill cut the first run short: the engine was on its one request, mid-answer.
      expect(atKill.requests).toBe(1);
      expect(atKill.running).toBe(1);
      const rowAtKill = await world.store().driver.get<JobRow>('SELECT * FROM jobs WHERE id = ?', [uuid]);
      expect(rowAtKill).toMatchObject({ status: 'running', attempts: 1 });

      const second = await startServerProcess(world.env);
      const restartedAt = Date.now();
      const after = openai(second.url, adminKey);
      const done = await waitUntil(
        async () => {
          const response = await after.responses.retrieve(created.id);
          return response.status === 'in_progress' || response.status === 'queued' ? undefined : response;
        },
        { timeoutMs: 20_000, intervalMs: 50, describe: () => `${created.id} to finish` },
      );
      const doneAt = Date.now();

      // The caller sees its response, under the id it was given, completed with an answer.
      expectValidResponse(created);
      expectValidResponse(done);
      expect(done.id).toBe(created.id);
      expect(done.created_at).toBe(created.created_at);
      expect(done.status).toBe('completed');
      expect(done.background).toBe(true);
      expect(done.error).toBeNull();
      expect(done.output_text.length).toBeGreaterThan(0);
      const usage = done.usage as OpenAI.Responses.ResponseUsage;
      expect(usage.output_tokens).toBeGreaterThan(atKill.generationTokens);
      expect(usage.input_tokens).toBeGreaterThan(0);

      // The first run died with its process; the second, in the new gateway, completed it.
      const job = await world.store().driver.get<JobRow>('SELECT * FROM jobs WHERE id = ?', [uuid]);
      expect(job).toMatchObject({ kind: 'response', status: 'completed', attempts: 2, error_code: null });
      expect(job?.lease_owner).toBeNull();
      expect(sim.stats().requests).toBe(2);

      // Billed once, for the run that completed: one ledger row, with the answer's token counts.
      const ledger = await world
        .store()
        .driver.all<LedgerRow>('SELECT * FROM usage_ledger WHERE job_id = ?', [uuid]);
      expect(ledger).toHaveLength(1);
      const row = ledger[0] as LedgerRow;
      expect(row).toMatchObject({ kind: 'response', status: 'completed' });
      expect(Number(row.input_units)).toBe(usage.input_tokens);
      expect(Number(row.output_units)).toBe(usage.output_tokens);
      // And the organisation's usage, as the API reports it, counts the response once.
      const summary = (await (
        await fetch(`${second.url}/api/v1/usage`, { headers: { authorization: `Bearer ${adminKey}` } })
      ).json()) as { data: Array<{ kind: string; jobs: number; output_units: number }> };
      expect(summary.data.filter((d) => d.kind === 'response')).toEqual([
        expect.objectContaining({ jobs: 1, completed: 1, output_units: usage.output_tokens }),
      ]);

      console.log(
        `[${storeCase.name}] killed ${killedAt - t0} ms after start, ${atKill.generationTokens} of ` +
          `${usage.output_tokens} tokens generated; restart took ${restartedAt - killedAt} ms; ` +
          `completed ${doneAt - restartedAt} ms after restart`,
      );
    }, 30_000);
  });
}
