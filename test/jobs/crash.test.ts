import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import type { JobRow } from '../../src/store/types.js';
import {
  type KilnProcess,
  killAll,
  mapLimit,
  processWorld,
  startServerProcess,
  startWorkerProcess,
  waitUntil,
} from '../helpers/process.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * Real processes, really killed: jobs survive a `kill -9` of the process running them, are billed
 * once, and two worker processes on one PostgreSQL database never run the same job twice.
 */

const TERMINAL = ['completed', 'failed', 'cancelled', 'timeout'];

interface SideEffect {
  what: 'start' | 'end';
  id: string;
  attempt: number;
  pid: number;
  at: number;
}

/** The `start`/`end` lines the test kind wrote; a line still being written is left for later. */
function readSideEffects(file: string): SideEffect[] {
  if (!existsSync(file)) return [];
  const text = readFileSync(file, 'utf8');
  const complete = text.slice(0, text.lastIndexOf('\n') + 1);
  return complete
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const [what, id, attempt, pid, at] = line.split(' ');
      if ((what !== 'start' && what !== 'end') || !id || !attempt || !pid || !at) {
        throw new Error(`unexpected side-effect line: ${line}`);
      }
      return { what, id, attempt: Number(attempt), pid: Number(pid), at: Number(at) };
    });
}

const groupBy = <T>(items: readonly T[], key: (item: T) => string) => {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
};

const randomMs = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));

/** One scenario's temporary world, with the file the test kind writes its side effects to. */
function scenario(storeCase: StoreCase) {
  const world = processWorld(storeCase, 'kiln-crash-');
  const sideEffects = path.join(world.dataDir, 'side-effects.log');
  return {
    ...world,
    sideEffects,
    env: (extra: Record<string, string> = {}) =>
      world.env({ KILN_JOBS_WORKERS: '8', KILN_TEST_SIDE_EFFECTS: sideEffects, ...extra }),
  };
}

/** Submits `count` async sleep jobs, `concurrency` at a time; answers the bare ids that got a 202. */
async function submitJobs(
  url: string,
  adminKey: string,
  count: number,
  concurrency: number,
  ms: () => number,
): Promise<string[]> {
  const answers = await mapLimit(Array.from({ length: count }), concurrency, async () => {
    const response = await fetch(`${url}/v1/test/sleep`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ms: ms(), mode: 'async' }),
    });
    const body = (await response.json()) as { id?: string };
    if (response.status !== 202)
      throw new Error(`submission answered ${response.status}: ${JSON.stringify(body)}`);
    return String(body.id).replace(/^test-/, '');
  });
  return answers;
}

async function jobsById(store: Store, ids: readonly string[]): Promise<Map<string, JobRow>> {
  const rows = await store.driver.all<JobRow>('SELECT * FROM jobs');
  const wanted = new Set(ids);
  return new Map(rows.filter((r) => wanted.has(r.id)).map((r) => [r.id, r]));
}

async function terminalCount(store: Store): Promise<number> {
  const row = await store.driver.get<{ n: number | string }>(
    `SELECT COUNT(*) AS n FROM jobs WHERE status IN (${TERMINAL.map(() => '?').join(', ')})`,
    TERMINAL,
  );
  return Number(row?.n ?? 0);
}

async function statusCounts(store: Store): Promise<string> {
  const rows = await store.driver.all<{ status: string; n: number | string }>(
    'SELECT status, COUNT(*) AS n FROM jobs GROUP BY status ORDER BY status',
  );
  return rows.map((r) => `${r.status}=${r.n}`).join(' ');
}

/** Usage rows per job id (COUNT is a string on PostgreSQL). */
async function usageCounts(store: Store): Promise<Map<string, number>> {
  const rows = await store.driver.all<{ job_id: string; n: number | string }>(
    'SELECT job_id, COUNT(*) AS n FROM usage_ledger GROUP BY job_id',
  );
  return new Map(rows.map((r) => [r.job_id, Number(r.n)]));
}

afterAll(async () => {
  await killAll();
});

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`jobs survive kill -9: ${caseTitle(storeCase)}`, () => {
    let world: ReturnType<typeof scenario>;
    beforeEach(() => {
      world = scenario(storeCase);
    });
    afterEach(async () => {
      await world.cleanup();
    });

    it('every accepted job completes exactly once in the ledger after the worker process is killed mid-run', async () => {
      const TOTAL = 500;
      const KILL_AFTER_ENDS = 100;
      const t0 = Date.now();

      const first: KilnProcess & { url: string } = await startServerProcess(world.env());
      const adminKey = world.adminKey();
      const ids = await submitJobs(first.url, adminKey, TOTAL, 20, () => randomMs(20, 60));
      expect(new Set(ids).size).toBe(TOTAL);
      const submittedAt = Date.now();

      // Kill once a fair share has run, so many jobs are queued and eight are mid-handler.
      // On a loaded machine the workers may be between jobs at that moment: wait for one mid-handler.
      await waitUntil(
        () => {
          const effects = readSideEffects(world.sideEffects);
          const ended = new Set(effects.filter((e) => e.what === 'end').map((e) => e.id));
          return ended.size >= KILL_AFTER_ENDS && effects.some((e) => e.what === 'start' && !ended.has(e.id));
        },
        {
          timeoutMs: 20_000,
          intervalMs: 5,
          describe: () => `${KILL_AFTER_ENDS} finished handlers and one running`,
        },
      );
      await first.kill('SIGKILL');
      const killedAt = Date.now();
      const beforeKill = readSideEffects(world.sideEffects);
      const endedBeforeKill = new Set(beforeKill.filter((e) => e.what === 'end').map((e) => e.id));
      const cutMidHandler = beforeKill.filter((e) => e.what === 'start' && !endedBeforeKill.has(e.id));
      const terminalAtKill = await terminalCount(world.store());

      const second = await startServerProcess(world.env());
      const restartedAt = Date.now();
      await waitUntil(async () => (await terminalCount(world.store())) === TOTAL, {
        timeoutMs: 30_000,
        intervalMs: 100,
        describe: async () => `all ${TOTAL} jobs terminal (${await statusCounts(world.store())})`,
      });
      const doneAt = Date.now();

      // Every accepted job exists and completed; no crash cost more than the attempts allowed.
      const jobs = await jobsById(world.store(), ids);
      expect(jobs.size).toBe(TOTAL);
      const statuses = groupBy([...jobs.values()], (j) => j.status);
      expect([...statuses.keys()]).toEqual(['completed']);
      for (const job of jobs.values()) {
        expect(job.attempts).toBeGreaterThanOrEqual(1);
        expect(job.attempts).toBeLessThanOrEqual(3);
        expect(job.error_code).toBeNull();
        expect(job.lease_owner).toBeNull();
      }

      // Billing: exactly one ledger row per job, no more, no fewer.
      const usage = await usageCounts(world.store());
      expect(usage.size).toBe(TOTAL);
      expect([...usage.keys()].sort()).toEqual([...ids].sort());
      expect([...usage.values()].every((n) => n === 1)).toBe(true);

      // Side effects: nothing ran after its job completed, and only the crash caused re-runs.
      const effects = readSideEffects(world.sideEffects);
      const byJob = groupBy(effects, (e) => e.id);
      expect([...byJob.keys()].every((id) => jobs.has(id))).toBe(true);
      let rerunEnds = 0;
      for (const [id, job] of jobs) {
        const lines = byJob.get(id) ?? [];
        const result = JSON.parse(job.result ?? 'null') as { slept: number; attempt: number };
        // The stored result is the final attempt's.
        expect(result.attempt, id).toBe(job.attempts);
        for (const line of lines) {
          expect(line.attempt, `${id} ${line.what} of a later attempt than the job's`).toBeLessThanOrEqual(
            job.attempts,
          );
          expect(line.at, `${id} ${line.what} after the job completed`).toBeLessThanOrEqual(
            job.finished_at as number,
          );
          // An earlier attempt only ever ran in the process that was killed.
          if (line.attempt < job.attempts) expect(line.pid, id).toBe(first.pid);
        }
        for (const [attempt, perAttempt] of groupBy(lines, (l) => String(l.attempt))) {
          expect(perAttempt.filter((l) => l.what === 'start').length, `${id} #${attempt}`).toBe(1);
          expect(perAttempt.filter((l) => l.what === 'end').length, `${id} #${attempt}`).toBeLessThanOrEqual(
            1,
          );
        }
        const finalEnds = lines.filter((l) => l.what === 'end' && l.attempt === job.attempts);
        expect(finalEnds.length, id).toBe(1);
        rerunEnds += lines.filter((l) => l.what === 'end' && l.attempt < job.attempts).length;
      }

      // The crash really hit running work: some jobs were cut mid-handler and ran again.
      const rerun = [...jobs.values()].filter((j) => j.attempts > 1);
      expect(cutMidHandler.length).toBeGreaterThan(0);
      expect(rerun.length).toBeGreaterThan(0);
      expect(terminalAtKill).toBeLessThan(TOTAL);
      for (const line of cutMidHandler) expect(jobs.get(line.id)?.attempts).toBeGreaterThan(1);
      // Jobs that never started before the crash ran once, in the new process.
      const startedBeforeKill = new Set(beforeKill.map((e) => e.id));
      const ranOnlyAfter = [...jobs.values()].filter((j) => !startedBeforeKill.has(j.id));
      expect(ranOnlyAfter.every((j) => (byJob.get(j.id) ?? []).every((l) => l.pid === second.pid))).toBe(
        true,
      );

      console.log(
        `[${storeCase.name}] ${TOTAL} submitted in ${submittedAt - t0} ms (incl. start); killed after ` +
          `${beforeKill.filter((e) => e.what === 'end').length} handler ends (${terminalAtKill} terminal) ` +
          `${killedAt - submittedAt} ms later; ${cutMidHandler.length} cut mid-handler; ` +
          `restart took ${restartedAt - killedAt} ms; all terminal ${doneAt - restartedAt} ms after restart; ` +
          `re-run: ${rerun.length} jobs (max attempts ${Math.max(...rerun.map((j) => j.attempts))}), ` +
          `${rerunEnds} handler ends of attempts whose completion was lost; ` +
          `${jobs.size - ranOnlyAfter.length} jobs started before the kill, ${ranOnlyAfter.length} after`,
      );
    }, 45_000);
  });
}

const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;

describe.skipIf(postgres.skip)(`two worker processes on one database: ${caseTitle(postgres)}`, () => {
  let world: ReturnType<typeof scenario>;
  beforeEach(() => {
    world = scenario(postgres);
  });
  afterEach(async () => {
    await world.cleanup();
  });

  it('runs every job exactly once, never concurrently, spread over both workers', async () => {
    const TOTAL = 300;
    const t0 = Date.now();
    const gateway = await startServerProcess(world.env({ KILN_JOBS_WORKERS: '0' }));
    const [a, b] = await Promise.all([
      startWorkerProcess(world.env({ KILN_JOBS_WORKERS: '8' })),
      startWorkerProcess(world.env({ KILN_JOBS_WORKERS: '8' })),
    ]);
    const workerA = a as KilnProcess;
    const workerB = b as KilnProcess;
    const startedAt = Date.now();

    const ids = await submitJobs(gateway.url, world.adminKey(), TOTAL, 20, () => randomMs(5, 30));
    expect(new Set(ids).size).toBe(TOTAL);
    await waitUntil(async () => (await terminalCount(world.store())) === TOTAL, {
      timeoutMs: 30_000,
      intervalMs: 100,
      describe: async () => `all ${TOTAL} jobs terminal (${await statusCounts(world.store())})`,
    });
    const doneAt = Date.now();

    const jobs = await jobsById(world.store(), ids);
    expect(jobs.size).toBe(TOTAL);
    expect([...jobs.values()].every((j) => j.status === 'completed' && j.attempts === 1)).toBe(true);

    const effects = readSideEffects(world.sideEffects);
    const byJob = groupBy(effects, (e) => e.id);
    expect(byJob.size).toBe(TOTAL);
    for (const id of ids) {
      const lines = byJob.get(id) ?? [];
      expect(lines.map((l) => l.what).sort(), id).toEqual(['end', 'start']);
      expect(new Set(lines.map((l) => l.pid)).size, `${id} ran in more than one process`).toBe(1);
      // Runs of one job, as [start, end] per (attempt, pid), never overlap.
      const runs = [...groupBy(lines, (l) => `${l.attempt} ${l.pid}`).values()]
        .map((run) => ({
          from: Math.min(...run.map((l) => l.at)),
          to: Math.max(...run.map((l) => l.at)),
        }))
        .sort((x, y) => x.from - y.from);
      for (let i = 1; i < runs.length; i++) {
        expect((runs[i] as { from: number }).from, id).toBeGreaterThan((runs[i - 1] as { to: number }).to);
      }
    }

    const pids = groupBy(
      effects.filter((e) => e.what === 'start'),
      (e) => String(e.pid),
    );
    expect([...pids.keys()].sort()).toEqual([String(workerA.pid), String(workerB.pid)].sort());
    expect(pids.has(String(gateway.pid))).toBe(false);

    const usage = await usageCounts(world.store());
    expect(usage.size).toBe(TOTAL);
    expect([...usage.values()].every((n) => n === 1)).toBe(true);

    console.log(
      `[postgres, 2 workers] processes up in ${startedAt - t0} ms; ${TOTAL} jobs done ${doneAt - startedAt} ms ` +
        `after; worker ${workerA.pid} ran ${pids.get(String(workerA.pid))?.length ?? 0}, ` +
        `worker ${workerB.pid} ran ${pids.get(String(workerB.pid))?.length ?? 0}`,
    );
  }, 45_000);
});
