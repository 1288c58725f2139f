import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import type { Admission } from '../../src/store/repos/admissions.js';
import type { JobRow } from '../../src/store/types.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { callGateway as call } from '../helpers/http.js';
import {
  type KilnProcess,
  killAll,
  type ProcessWorld,
  processWorld,
  startServerProcess,
  startWorkerProcess,
  waitUntil,
} from '../helpers/process.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * Limits across real gateway processes on one PostgreSQL schema: admissions are counted in the
 * store under a lock on the caller, so a burst spread over two gateways is admitted exactly, and a
 * gateway killed with reservations outstanding leaks none of them.
 */

const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;

type Gateway = KilnProcess & { url: string };
/** A new organisation and a key of it with `limits`, made through a gateway's admin API. */
async function limitedKey(
  gateway: Gateway,
  adminKey: string,
  org: string,
  limits: Record<string, number>,
): Promise<{ key: string; id: string }> {
  const made = await call(gateway.url, adminKey, 'POST', '/admin/v1/orgs', { name: org });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  const key = await call(gateway.url, adminKey, 'POST', '/admin/v1/keys', { org, limits });
  expect(key.status, JSON.stringify(key.body)).toBe(201);
  expect(key.body.limits).toEqual(limits);
  return { key: key.body.key, id: key.body.id };
}

/** An OpenAI reset duration (`20ms`, `41.5s`, `1m0s`) in milliseconds; NaN when it is not one. */
function resetMs(text: string | null): number {
  const match = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$|^(\d+)ms$/.exec(text ?? '');
  if (!match || text === '') return Number.NaN;
  if (match[4] !== undefined) return Number(match[4]);
  return (Number(match[1] ?? 0) * 3600 + Number(match[2] ?? 0) * 60 + Number(match[3] ?? 0)) * 1000;
}

const bare = (publicId: string) => publicId.replace(/^[a-z]+[-_]/, '');

async function admissionsOf(world: ProcessWorld, keyId: string): Promise<Admission[]> {
  const rows = await world
    .store()
    .driver.all<Record<string, unknown>>('SELECT * FROM admissions WHERE key_id = ? ORDER BY created_at', [
      keyId,
    ]);
  return rows.map((r) => ({
    ...(r as unknown as Admission),
    tokens: Number(r.tokens),
    media_ms: Number(r.media_ms),
    held: Number(r.held),
    created_at: Number(r.created_at),
  }));
}

async function jobRows(world: ProcessWorld, ids: readonly string[]): Promise<Map<string, JobRow>> {
  const rows = await world
    .store()
    .driver.all<JobRow>(`SELECT * FROM jobs WHERE id IN (${ids.map(() => '?').join(', ')})`, ids);
  return new Map(rows.map((r) => [r.id, r]));
}

async function ledgerUnits(world: ProcessWorld, ids: readonly string[]): Promise<Map<string, number>> {
  const rows = await world
    .store()
    .driver.all<{ job_id: string; input_units: number | string; output_units: number | string }>(
      `SELECT job_id, input_units, output_units FROM usage_ledger WHERE job_id IN (${ids.map(() => '?').join(', ')})`,
      ids,
    );
  return new Map(rows.map((r) => [r.job_id, Number(r.input_units) + Number(r.output_units)]));
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'timeout']);
const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0);
const tokensOf = (usage: { prompt_tokens: number; completion_tokens: number }) =>
  usage.prompt_tokens + usage.completion_tokens;

afterAll(async () => {
  await killAll();
});

describe.skipIf(postgres.skip)(`limits across gateway processes: ${caseTitle(postgres)}`, () => {
  let world: ProcessWorld;
  let quick: LlmSim;
  let slow: LlmSim;
  let g1: Gateway;
  let g2: Gateway;
  let adminKey: string;
  /** The environment of every child: the shared schema and data dir, and the fleet's config file. */
  let env: (extra?: Record<string, string>) => Record<string, string>;

  beforeAll(async () => {
    [quick] = (await simPool(1)) as [LlmSim];
    // Jobs on this one run for many seconds; it stops generating when Kiln goes away.
    [slow] = (await simPool(1, { decodeMsPerToken: 50, nonStreamDisconnect: 'cancel' })) as [LlmSim];
    world = processWorld(postgres, 'kiln-limits-');
    const config = path.join(world.dataDir, 'kiln.json');
    writeFileSync(
      config,
      JSON.stringify({
        engines: {
          quick: engine('unique', [quick]),
          slow: engine('unique', [slow], { models: { slow: 'sim-model' } }),
        },
      }),
    );
    env = (extra = {}) => world.env({ KILN_CONFIG: config, ...extra });
    // Two HTTP-only gateways: what they admit stays queued until a test starts a worker.
    g1 = await startServerProcess(env({ KILN_JOBS_WORKERS: '0' }));
    g2 = await startServerProcess(env({ KILN_JOBS_WORKERS: '0' }));
    adminKey = world.adminKey();
  }, 60_000);

  afterAll(async () => {
    await world?.cleanup();
    await closeAll([quick, slow].filter(Boolean));
  });

  it('requests_per_minute 10: 40 requests at once across both gateways admit exactly 10, the rest get 429 with Retry-After and the x-ratelimit headers', async () => {
    const { key } = await limitedKey(g1, adminKey, 'rpm-burst', { requests_per_minute: 10 });
    const gateways = [g1, g2];
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        call((gateways[i % 2] as Gateway).url, key, 'POST', '/v1/test/sleep', { ms: 1, mode: 'async' }),
      ),
    );
    const admitted = answers.filter((a) => a.status === 202);
    const refused = answers.filter((a) => a.status === 429);
    expect(
      answers.filter((a) => a.status !== 202 && a.status !== 429).map((a) => [a.status, a.body]),
    ).toEqual([]);
    expect(admitted).toHaveLength(10);
    expect(refused).toHaveLength(30);

    // Each admission saw the ones before it, whichever gateway made them: 9 left, then 8, … then 0.
    for (const a of admitted) {
      expect(a.headers.get('x-ratelimit-limit-requests')).toBe('10');
      const reset = resetMs(a.headers.get('x-ratelimit-reset-requests'));
      expect(reset, a.headers.get('x-ratelimit-reset-requests') ?? 'no reset header').toBeGreaterThan(0);
      expect(reset).toBeLessThanOrEqual(60_000);
    }
    expect(
      admitted.map((a) => Number(a.headers.get('x-ratelimit-remaining-requests'))).sort((x, y) => x - y),
    ).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);

    for (const r of refused) {
      expect(r.body.error).toMatchObject({
        type: 'rate_limit_error',
        code: 'rate-limited',
        param: 'requests_per_minute',
      });
      expect(r.body.error.details).toEqual([
        expect.objectContaining({ field: 'requests_per_minute', scope: 'key', limit: 10, used: 10 }),
      ]);
      // The window frees its oldest admission within the minute; Retry-After says so in seconds.
      const retryAfter = Number(r.headers.get('retry-after'));
      const retryAfterMs = Number(r.headers.get('retry-after-ms'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(retryAfter).toBe(Math.max(1, Math.ceil(retryAfterMs / 1000)));
      expect(r.headers.get('x-should-retry')).toBeNull();
      expect(r.headers.get('x-ratelimit-limit-requests')).toBe('10');
      expect(r.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      const reset = resetMs(r.headers.get('x-ratelimit-reset-requests'));
      expect(reset, r.headers.get('x-ratelimit-reset-requests') ?? 'no reset header').toBeGreaterThan(0);
      expect(reset).toBeLessThanOrEqual(60_000);
    }

    // Exactly the admitted requests became jobs; a refused one left nothing behind.
    const listed = await call(g2.url, key, 'GET', '/v1/jobs?limit=100');
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((j: { id: string }) => j.id).sort()).toEqual(
      admitted.map((a) => a.body.id).sort(),
    );
    expect(listed.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    // Still refused afterwards, on either gateway.
    for (const g of gateways)
      expect((await call(g.url, key, 'POST', '/v1/test/sleep', { ms: 1, mode: 'async' })).status).toBe(429);

    const byGateway = gateways.map(
      (_, g) => answers.filter((a, i) => i % 2 === g && a.status === 202).length,
    );
    console.log(`[rpm burst] admitted ${byGateway.join(' + ')} (gateway 1 + gateway 2)`);
  });

  it('tokens_per_minute: a burst across both gateways overshoots the limit by less than one reservation, and the admissions settle to the usage the jobs really had', async () => {
    const LIMIT = 1000;
    const { key, id: keyId } = await limitedKey(g1, adminKey, 'tpm-burst', { tokens_per_minute: LIMIT });
    const gateways = [g1, g2];
    // Equal requests, so equal reservations; the stop string ends each answer well before max_tokens.
    const ask = (i: number) => ({
      model: 'm',
      mode: 'async',
      messages: [{ role: 'user', content: `Question ${String(i).padStart(2, '0')}: tell me about kilns.` }],
      max_tokens: 100,
      stop: ['.'],
      seed: i,
    });
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        call((gateways[i % 2] as Gateway).url, key, 'POST', '/v1/chat/completions', ask(i)),
      ),
    );
    const admitted = answers.filter((a) => a.status === 202);
    const refused = answers.filter((a) => a.status === 429);
    expect(
      answers.filter((a) => a.status !== 202 && a.status !== 429).map((a) => [a.status, a.body]),
    ).toEqual([]);
    const ids = admitted.map((a) => bare(a.body.id));

    // No gateway has workers: every admission still holds its reservation.
    const held = await admissionsOf(world, keyId);
    expect(held.map((r) => r.job_id).sort()).toEqual([...ids].sort());
    expect(held.every((r) => r.held === 1)).toBe(true);
    const reservation = held[0]?.tokens ?? 0;
    expect(reservation).toBeGreaterThan(100);
    expect(held.every((r) => r.tokens === reservation)).toBe(true);
    const reserved = sum(held.map((r) => r.tokens));
    // Admitted while anything was left, and no further: over by less than one request's reservation.
    expect(reserved).toBeGreaterThanOrEqual(LIMIT);
    expect(reserved).toBeLessThan(LIMIT + reservation);
    expect(admitted).toHaveLength(Math.ceil(LIMIT / reservation));
    expect(refused).toHaveLength(40 - admitted.length);

    // Each admission counted the ones before it, whichever gateway made them.
    for (const a of admitted) expect(a.headers.get('x-ratelimit-limit-tokens')).toBe(String(LIMIT));
    expect(
      admitted.map((a) => Number(a.headers.get('x-ratelimit-remaining-tokens'))).sort((x, y) => x - y),
    ).toEqual(admitted.map((_, k) => Math.max(0, LIMIT - (k + 1) * reservation)).sort((x, y) => x - y));
    for (const r of refused) {
      expect(r.body.error).toMatchObject({ code: 'rate-limited', param: 'tokens_per_minute' });
      expect(r.body.error.details).toEqual([
        expect.objectContaining({ field: 'tokens_per_minute', scope: 'key', limit: LIMIT, used: reserved }),
      ]);
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(Number(r.headers.get('retry-after'))).toBeLessThanOrEqual(60);
      expect(r.headers.get('x-ratelimit-limit-tokens')).toBe(String(LIMIT));
      expect(r.headers.get('x-ratelimit-remaining-tokens')).toBe('0');
      expect(resetMs(r.headers.get('x-ratelimit-reset-tokens'))).toBeGreaterThan(0);
    }

    // A worker process runs them; each ending replaces the reservation with the real usage.
    const worker = await startWorkerProcess(env({ KILN_JOBS_WORKERS: '8' }));
    try {
      await waitUntil(
        async () => [...(await jobRows(world, ids)).values()].every((j) => TERMINAL.has(j.status)),
        { timeoutMs: 30_000, intervalMs: 100, describe: () => `the ${ids.length} admitted chat jobs ending` },
      );
    } finally {
      await worker.kill();
    }
    const used = new Map<string, number>();
    for (const [i, id] of ids.entries()) {
      const polled = await call(gateways[i % 2]?.url as string, key, 'GET', `/api/v1/jobs/${id}`);
      expect(polled.body).toMatchObject({ status: 'completed', kind: 'chat' });
      used.set(id, tokensOf(polled.body.result.usage));
    }
    const settled = await admissionsOf(world, keyId);
    expect(settled.filter((r) => r.held !== 0)).toEqual([]);
    expect(new Map(settled.map((r) => [r.job_id, r.tokens]))).toEqual(used);
    const ledger = await ledgerUnits(world, ids);
    expect(ledger).toEqual(used);
    const realTotal = sum(used.values());
    // The stop string ended the answers early: settling gave back most of what was reserved.
    expect(realTotal).toBeLessThan(reserved);

    // The caller sees the real usage in its window, on either gateway.
    for (const g of gateways) {
      const usage = await call(g.url, key, 'GET', '/api/v1/usage');
      expect(usage.body.limits.key.tokens_per_minute).toMatchObject({ limit: LIMIT, used: realTotal });
    }
    console.log(
      `[tpm burst] ${admitted.length} admitted of 40 (reservation ${reservation}, ${reserved} reserved ` +
        `against ${LIMIT}); settled to ${realTotal} tokens really used`,
    );
  }, 60_000);

  it('a gateway killed with reservations outstanding: after restart, what never ran is released and the budget counts only what jobs really used', async () => {
    const DAY_BUDGET = 2000;
    const { key, id: keyId } = await limitedKey(g1, adminKey, 'crash-budget', {
      concurrent: 4,
      tokens_per_day: DAY_BUDGET,
    });
    // A gateway that runs jobs itself: two at a time, one attempt each, a 1 s lease.
    const crashEnv = env({
      KILN_JOBS_WORKERS: '2',
      KILN_JOBS_MAX_ATTEMPTS: '1',
      KILN_JOBS_LEASE_SECONDS: '1',
    });
    const doomed = await startServerProcess(crashEnv);
    const submit = async (gateway: Gateway, model: string, mode: 'async' | 'sync') =>
      call(gateway.url, key, 'POST', '/v1/chat/completions', {
        model,
        mode,
        messages: [{ role: 'user', content: 'Tell me about kilns.' }],
        max_tokens: 500,
      });
    const accepted = async (gateway: Gateway, model: string) => {
      const answer = await submit(gateway, model, 'async');
      expect(answer.status, JSON.stringify(answer.body)).toBe(202);
      return bare(answer.body.id);
    };
    const statuses = async (ids: string[]) =>
      [...(await jobRows(world, ids)).values()].map((j) => `${j.id}=${j.status}`).join(' ');

    // Two long jobs take both of its workers (25 s each on the slow replica)…
    const running = [await accepted(doomed, 'slow'), await accepted(doomed, 'slow')];
    await waitUntil(
      async () => [...(await jobRows(world, running)).values()].every((j) => j.status === 'running'),
      { timeoutMs: 15_000, describe: async () => `both long jobs running (${await statuses(running)})` },
    );
    // …so two more wait in the queue: they never run on it.
    const queued = [await accepted(doomed, 'm'), await accepted(doomed, 'm')];
    const before = await jobRows(world, [...running, ...queued]);
    expect(running.map((id) => before.get(id)?.status)).toEqual(['running', 'running']);
    expect(queued.map((id) => before.get(id)?.status)).toEqual(['queued', 'queued']);
    const reservations = await admissionsOf(world, keyId);
    expect(reservations.map((r) => r.held)).toEqual([1, 1, 1, 1]);
    const reserved = sum(reservations.map((r) => r.tokens));
    expect(reserved).toBeGreaterThanOrEqual(DAY_BUDGET);

    // At both limits: the next request is refused by the surviving gateway, the budget included.
    const atLimit = await submit(g1, 'm', 'sync');
    expect(atLimit.status).toBe(429);
    expect(atLimit.body.error).toMatchObject({ type: 'insufficient_quota', code: 'budget-exceeded' });
    expect(atLimit.headers.get('x-should-retry')).toBe('false');
    expect(atLimit.body.error.details).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ field: 'concurrent', limit: 4, used: 4 }),
        expect.objectContaining({ field: 'tokens_per_day', limit: DAY_BUDGET, used: reserved }),
      ]),
    );

    await doomed.kill('SIGKILL');
    expect((await jobRows(world, running)).get(running[0] as string)?.status).toBe('running');

    // The dead gateway's reservations are still counted: nothing ended its jobs yet.
    const cancelled = await call(g1.url, key, 'POST', `/api/v1/jobs/${queued[1]}/cancel`);
    expect(cancelled.body).toMatchObject({ status: 'cancelled' });
    const meanwhile = await call(g1.url, key, 'GET', '/api/v1/usage');
    expect(meanwhile.body.limits.key.concurrent).toMatchObject({ limit: 4, used: 3 });
    const cancelledTokens = reservations.find((r) => r.job_id === queued[1])?.tokens ?? 0;
    expect(meanwhile.body.limits.key.tokens_per_day).toMatchObject({ used: reserved - cancelledTokens });

    // Restarted: it runs the job still queued, and its sweeper ends the two cut off mid-run.
    const restarted = await startServerProcess(crashEnv);
    const all = [...running, ...queued];
    await waitUntil(
      async () => [...(await jobRows(world, all)).values()].every((j) => TERMINAL.has(j.status)),
      {
        timeoutMs: 20_000,
        intervalMs: 100,
        describe: async () => `every job ending (${await statuses(all)})`,
      },
    );
    const after = await jobRows(world, all);
    for (const id of running)
      expect(after.get(id)).toMatchObject({ status: 'failed', error_code: 'worker-lost' });
    expect(after.get(queued[0] as string)).toMatchObject({ status: 'completed', attempts: 1 });
    expect(after.get(queued[1] as string)).toMatchObject({ status: 'cancelled', attempts: 0 });
    const ran = await call(restarted.url, key, 'GET', `/api/v1/jobs/${queued[0]}`);
    expect(ran.body.status).toBe('completed');
    const really = tokensOf(ran.body.result.usage);
    expect(really).toBeGreaterThan(0);

    // No admission is left held; what never ran or was cut off is released, the rest is real usage.
    const settled = new Map((await admissionsOf(world, keyId)).map((r) => [r.job_id, r]));
    expect([...settled.values()].filter((r) => r.held !== 0)).toEqual([]);
    expect(new Map([...settled].map(([id, r]) => [id, r.tokens]))).toEqual(
      new Map([
        [running[0], 0],
        [running[1], 0],
        [queued[0], really],
        [queued[1], 0],
      ]),
    );
    const ledger = await ledgerUnits(world, all);
    expect(sum(ledger.values())).toBe(really);

    // The caller's standing, on every gateway: nothing running, the budget spent only by real usage.
    for (const g of [g1, g2, restarted]) {
      const usage = await call(g.url, key, 'GET', '/api/v1/usage');
      expect(usage.body.limits.key.concurrent).toMatchObject({ limit: 4, used: 0 });
      expect(usage.body.limits.key.tokens_per_day).toMatchObject({
        limit: DAY_BUDGET,
        used: really,
        remaining: DAY_BUDGET - really,
      });
    }
    // And the request refused before the crash is admitted now, and runs.
    const again = await submit(g2, 'm', 'sync');
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    const usage = await call(g1.url, key, 'GET', '/api/v1/usage');
    expect(usage.body.limits.key.tokens_per_day.used).toBe(really + tokensOf(again.body.usage));
    console.log(
      `[crash] ${reserved} tokens reserved at the kill (budget ${DAY_BUDGET}); after restart ${really} used`,
    );
  }, 60_000);
});
