/**
 * What limits cost a submission: `JobService.submit` (async, the job recorded and nothing run) on
 * each store, for a key without limits, a key with per-minute limits and `concurrent`, and a key
 * with day and month token budgets whose month already holds many admissions (the budgets are
 * sums over them). One key at a time in flight, then 16 in flight on the same key (admissions of
 * one caller are serialised by the store). Run with `npm run bench:limits`; writes the `limits`
 * section of docs/benchmarks.md.
 *
 * Environment: BENCH_REQUESTS (2000 per row), BENCH_LIMITS_POSTGRES_URL
 * (postgres://postgres@127.0.0.1:5432/test; a fresh schema, dropped after), BENCH_LIMITS_WRITE=0 (print only).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { issueKey } from '../src/auth/keys.js';
import { KindRegistry } from '../src/jobs/kinds.js';
import { JobService } from '../src/jobs/service.js';
import { Limiter } from '../src/limits/admission.js';
import { tokenMeter } from '../src/limits/meter.js';
import type { Limits } from '../src/limits/schema.js';
import { type ApiKey, openStore, type Store } from '../src/store/index.js';
import { sleepKind } from '../test/fixtures/sleep-kind.js';
import { load, machine, publishSection, runBench, scratchDir, scratchSchema } from './lib.js';

const TOTAL = Number(process.env.BENCH_REQUESTS ?? 2000);
const POSTGRES_URL = process.env.BENCH_LIMITS_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const WRITE = process.env.BENCH_LIMITS_WRITE !== '0';
/** The test kind, metered as a chat of a short prompt and `max_tokens: 16` would be. */
const kind = {
  ...sleepKind(),
  meter: tokenMeter(
    () => 'a short prompt',
    () => ({ max: 16 }),
  ),
};

interface Case {
  name: string;
  limits: Limits | undefined;
  /** Admissions already in the key's month before the measurement. */
  seed: number;
}

const CASES: Case[] = [
  { name: 'no limits', limits: undefined, seed: 0 },
  {
    name: 'requests_per_minute + tokens_per_minute + concurrent',
    limits: { requests_per_minute: 1e9, tokens_per_minute: 1e12, concurrent: 1e9 },
    seed: 0,
  },
  {
    name: 'tokens_per_day + tokens_per_month, 10 000 admissions this month',
    limits: { tokens_per_day: 1e12, tokens_per_month: 1e12 },
    seed: 10_000,
  },
  {
    name: 'tokens_per_day + tokens_per_month, 100 000 admissions this month',
    limits: { tokens_per_day: 1e12, tokens_per_month: 1e12 },
    seed: 100_000,
  },
];

/** `n` settled admissions of `key` spread over the month so far, written in batches. */
async function seedAdmissions(store: Store, key: ApiKey, n: number): Promise<void> {
  const now = Date.now();
  const monthStart = Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth(), 1);
  const batch = 500;
  for (let i = 0; i < n; i += batch) {
    const rows = Array.from({ length: Math.min(batch, n - i) }, (_, j) => i + j);
    await store.driver.run(
      `INSERT INTO admissions (job_id, key_id, org_id, created_at, tokens, media_ms, held) VALUES ${rows.map(() => '(?, ?, ?, ?, ?, 0, 0)').join(', ')}`,
      rows.flatMap((k) => [
        `seed-${key.id}-${k}`,
        key.id,
        key.org_id,
        monthStart + Math.floor(((now - monthStart) * k) / n),
        100,
      ]),
    );
  }
}

async function measure(store: Store, label: string): Promise<string[]> {
  const limiter = new Limiter({
    tiers: { free: {}, standard: {} },
    default_max_tokens: 1024,
    image_seconds: 1,
  });
  const jobs = new JobService(
    store,
    new KindRegistry([kind as never]),
    { retentionMs: 60_000, maxAttempts: 1 },
    limiter,
  );
  const rows: string[] = [];
  for (const c of CASES) {
    const org = await store.orgs.create(`bench-${Math.random().toString(36).slice(2)}`);
    const { record } = await issueKey(store, {
      orgId: org?.id as string,
      ...(c.limits ? { limits: c.limits } : {}),
    });
    await seedAdmissions(store, record, c.seed);
    const submit = async () => {
      await jobs.submit({ kind: kind as never, mode: 'async', caller: record, request: { ms: 1 } });
    };
    await load(200, 4, submit);
    for (const inFlight of [1, 16]) {
      const r = await load(TOTAL, inFlight, submit);
      rows.push(
        `| ${label} | ${c.name} | ${inFlight} | ${r.median.toFixed(2)} | ${r.p99.toFixed(2)} | ${Math.round(r.rps)} |`,
      );
      console.log(rows.at(-1));
    }
  }
  return rows;
}

await runBench(async () => {
  const rows: string[] = [];
  const dir = scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-bench-limits-')));
  const sqlite = openStore({ url: `sqlite:${path.join(dir, 'kiln.db')}`, schema: 'public', pool_size: 10 });
  await sqlite.migrate();
  rows.push(...(await measure(sqlite, 'sqlite')));
  await sqlite.close();
  const postgres = openStore({
    url: POSTGRES_URL,
    schema: scratchSchema(POSTGRES_URL, 'bench_limits'),
    pool_size: 10,
  });
  await postgres.migrate();
  rows.push(...(await measure(postgres, 'postgres')));
  await postgres.close();

  const body = `## Admission: what limits cost a submission

${new Date().toISOString().slice(0, 10)} · ${machine()} · \`npm run bench:limits\`, ${TOTAL} submissions per row

\`JobService.submit\` of an async job (recorded, notified, not run), in this process, on a fresh
SQLite file and a fresh PostgreSQL schema (\`store.pool_size\` 10). "no limits" is the path every
unlimited key takes: no admission is written. Limited keys admit in a transaction of their own, under a
lock on the key (PostgreSQL advisory lock), so 16 in flight on one key queue behind each other. The
budget rows sum the key's admissions of the day and the month; their cost grows with the month's
admissions (docs/limits.md).

| store | limits of the key | in flight (one key) | median ms | p99 ms | submissions/s |
|---|---|---|---|---|---|
${rows.join('\n')}`;
  publishSection('limits', body, WRITE);
});
