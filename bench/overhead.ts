/**
 * Gateway overhead: the same fixed chat-completions load (non-stream and stream) sent straight to a
 * canned OpenAI-compatible upstream, through Kiln on SQLite, through Kiln on PostgreSQL, and through
 * the Portkey gateway, each in a process of its own. Reports requests/s, p50/p99 latency and CPU per
 * request per target, and what each gateway adds over the direct path. Run with
 * `npm run bench:overhead`; writes the `overhead` section of docs/benchmarks.md.
 *
 * Environment: BENCH_REQUESTS (3000 per case), BENCH_WARMUP (20000: a gateway is measured warm, its code compiled, as after hours of serving; after
 * 3000, V8 still optimised about 35 of Kiln's functions during the measured requests, 9 % of its CPU), BENCH_CONCURRENCY (32),
 * BENCH_ROUNDS (3: each case's requests are split into rounds, interleaved across the targets, then
 * pooled), BENCH_REWARM (5000 unmeasured requests before each round, at most the warm-up), BENCH_UNLOADED (500 requests one at a time per case afterwards; 0 skips that pass),
 * BENCH_KILN_WORKERS (64), BENCH_OVERHEAD_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test; Kiln
 * runs on a fresh schema of it, dropped after), BENCH_OVERHEAD_WRITE=0 (print only),
 * BENCH_KILN_STORE_URL (diagnostic, e.g. sqlite::memory:, for the SQLite Kiln; default a fresh SQLite
 * file), BENCH_PROFILE=1 (the SQLite Kiln under --cpu-prof, loaded pass only: prints where its time
 * goes and writes no section, as the profiler slows it), BENCH_PROFILE_TARGET=postgres (profiles the
 * PostgreSQL Kiln instead).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import {
  cpuMs,
  machine,
  portkeyHeaders,
  publishSection,
  runBench,
  scratchDir,
  startKiln,
  startPortkey,
  startUpstream,
  summarise,
} from './lib.js';

const TOTAL = Number(process.env.BENCH_REQUESTS ?? 3000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 20000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const KILN_WORKERS = Number(process.env.BENCH_KILN_WORKERS ?? 64);
const UNLOADED = Number(process.env.BENCH_UNLOADED ?? 500);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/**
 * Unmeasured requests to a target just before each of its rounds. A Kiln that has waited half a
 * minute without traffic spends about twice the CPU on its next thousand requests (docs/operations.md,
 * "After a quiet spell"), and its first round would otherwise follow the other targets' warm-ups.
 */
const REWARM = Number(process.env.BENCH_REWARM ?? 5000);
const PROFILE = process.env.BENCH_PROFILE === '1';
/** Which Kiln BENCH_PROFILE profiles. */
const PROFILE_TARGET = process.env.BENCH_PROFILE_TARGET === 'postgres' ? 'postgres' : 'sqlite';
const POSTGRES_URL = process.env.BENCH_OVERHEAD_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const WRITE = process.env.BENCH_OVERHEAD_WRITE !== '0';
/** Diagnostic: another store for the SQLite Kiln (e.g. `sqlite::memory:` to tell disk from SQLite's own cost). */
const KILN_STORE_URL = process.env.BENCH_KILN_STORE_URL ?? '';
const KILN_LOG_LEVEL = 'warn';

const MODEL = 'bench-model';
/** What the canned upstream answers; every response, through every target, must carry exactly this. */
const EXPECTED = 'Hello from the canned upstream.';

// ---------------------------------------------------------------------------------------------------
// The load: unique prompts, one body shape for every target; every response checked.

interface Target {
  name: string;
  origin: string;
  headers: Record<string, string>;
}

interface Sample {
  ms: number;
  /** Stream: time to the first body bytes. */
  firstMs: number;
}

function verifyCompletion(text: string): void {
  const body = JSON.parse(text) as { object?: string; choices?: Array<{ message?: { content?: string } }> };
  if (body.object !== 'chat.completion') throw new Error(`object is ${body.object}`);
  const content = body.choices?.[0]?.message?.content;
  if (content !== EXPECTED) throw new Error(`content is ${JSON.stringify(content)}`);
}

function verifyStream(text: string): void {
  const events = text.split('\n\n').filter((e) => e.trim() !== '');
  if (events.at(-1)?.trim() !== 'data: [DONE]') throw new Error('stream does not end with data: [DONE]');
  let content = '';
  let usage = false;
  for (const event of events.slice(0, -1)) {
    if (!event.startsWith('data: ')) throw new Error(`not a data event: ${event.slice(0, 80)}`);
    const chunk = JSON.parse(event.slice(6)) as {
      object?: string;
      choices?: Array<{ delta?: { content?: string } }>;
      usage?: { total_tokens?: number };
    };
    if (chunk.object !== 'chat.completion.chunk') throw new Error(`chunk object is ${chunk.object}`);
    for (const choice of chunk.choices ?? []) content += choice.delta?.content ?? '';
    if (typeof chunk.usage?.total_tokens === 'number') usage = true;
  }
  if (content !== EXPECTED) throw new Error(`streamed content is ${JSON.stringify(content)}`);
  if (!usage) throw new Error('no usage chunk though stream_options.include_usage was asked');
}

async function once(pool: Pool, target: Target, stream: boolean, tag: string): Promise<Sample> {
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: `${tag}: reply with a short greeting.` }],
    max_tokens: 16,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
  const t0 = performance.now();
  const response = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: target.headers,
    body,
  });
  if (response.statusCode !== 200) {
    const text = await response.body.text().catch(() => '');
    throw new Error(`status ${response.statusCode}: ${text.slice(0, 200)}`);
  }
  if (!stream) {
    const text = await response.body.text();
    const ms = performance.now() - t0;
    verifyCompletion(text);
    return { ms, firstMs: ms };
  }
  let firstMs = 0;
  let doneMs = 0;
  const parts: Buffer[] = [];
  for await (const part of response.body as AsyncIterable<Buffer>) {
    const now = performance.now() - t0;
    if (parts.length === 0) firstMs = now;
    parts.push(part);
    if (!doneMs && part.includes('data: [DONE]')) doneMs = now;
  }
  const ms = doneMs || performance.now() - t0;
  verifyStream(Buffer.concat(parts).toString('utf8'));
  return { ms, firstMs };
}

/** What one stretch of load measured: raw samples, so interleaved rounds can be pooled. */
interface Batch {
  ms: number[];
  first: number[];
  errors: Map<string, number>;
  seconds: number;
  /** CPU time the target's process used meanwhile; undefined without /proc. */
  cpu: number | undefined;
}

async function drive(
  total: number,
  concurrency: number,
  pid: number | undefined,
  request: (i: number) => Promise<Sample>,
  offset = 0,
): Promise<Batch> {
  const batch: Batch = { ms: [], first: [], errors: new Map(), seconds: 0, cpu: undefined };
  let next = 0;
  const cpuBefore = cpuMs(pid);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = offset + next++;
        try {
          const sample = await request(i);
          batch.ms.push(sample.ms);
          batch.first.push(sample.firstMs);
        } catch (error) {
          const message = String((error as Error).message ?? error).slice(0, 200);
          batch.errors.set(message, (batch.errors.get(message) ?? 0) + 1);
        }
      }
    }),
  );
  batch.seconds = (performance.now() - started) / 1000;
  const cpuAfter = cpuMs(pid);
  if (cpuBefore !== undefined && cpuAfter !== undefined) batch.cpu = cpuAfter - cpuBefore;
  return batch;
}

interface CaseResult {
  rps: number;
  p50: number;
  p99: number;
  firstP50: number;
  ok: number;
  errors: Map<string, number>;
  /** CPU time of the target's process (the upstream for direct) per successful request. */
  cpuPerRequest: number | undefined;
}

/** Pools a target's rounds: percentiles over every sample, requests/s over the time under load. */
function pool(batches: Batch[]): CaseResult {
  const ms = batches.flatMap((b) => b.ms);
  const first = batches.flatMap((b) => b.first);
  const errors = new Map<string, number>();
  for (const b of batches) for (const [m, n] of b.errors) errors.set(m, (errors.get(m) ?? 0) + n);
  const seconds = batches.reduce((s, b) => s + b.seconds, 0);
  const cpus = batches.map((b) => b.cpu);
  const latency = ms.length > 0 ? summarise(ms) : { median: Number.NaN, p99: Number.NaN };
  return {
    rps: ms.length / seconds,
    p50: latency.median,
    p99: latency.p99,
    firstP50: first.length > 0 ? summarise(first).median : Number.NaN,
    ok: ms.length,
    errors,
    cpuPerRequest:
      ms.length > 0 && cpus.every((c) => c !== undefined)
        ? cpus.reduce((s: number, c) => s + (c as number), 0) / ms.length
        : undefined,
  };
}

// ---------------------------------------------------------------------------------------------------
// CPU profile summary (BENCH_PROFILE=1): where the profiled Kiln process spends its non-idle time.

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/** The store driver a profiled function belongs to, if any. */
function storeDriver(url: string): string | undefined {
  if (url.includes('better-sqlite3') || url.includes('/dist/store/sqlite/'))
    return 'SQLite (better-sqlite3 + driver)';
  if (/node_modules\/pg(-[a-z]+)?\//.test(url) || url.includes('/dist/store/postgres/'))
    return 'PostgreSQL (pg + driver)';
  return undefined;
}

function summariseProfile(name: string, file: string, top = 25): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: ProfileNode[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  const where = (node: ProfileNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const short = url.replace(/^.*\/(dist|node_modules)\//, '$1/');
    return `${functionName || '(anonymous)'}${short ? ` ${short}:${lineNumber + 1}` : ''}`;
  };
  const group = (url: string, functionName: string) => {
    const driver = storeDriver(url);
    if (driver) return driver;
    if (url.includes('node_modules/')) {
      const rest = url.split('node_modules/').pop() ?? '';
      return rest
        .split('/')
        .slice(0, rest.startsWith('@') ? 2 : 1)
        .join('/');
    }
    if (url.includes('/dist/')) return `kiln ${url.split('/dist/')[1]?.split('/')[0] ?? ''}`;
    if (url.startsWith('node:')) return 'Node core (JS)';
    return functionName.startsWith('(') ? functionName : 'native (syscalls, natives)';
  };
  let busy = 0;
  const perFunction = new Map<string, number>();
  const perGroup = new Map<string, number>();
  const storeByCaller = new Map<string, number>();
  for (const [id, us] of self) {
    const node = byId.get(id) as ProfileNode;
    if (node.callFrame.functionName === '(idle)' || node.callFrame.functionName === '(program)') continue;
    busy += us;
    const key = where(node);
    perFunction.set(key, (perFunction.get(key) ?? 0) + us);
    const g = group(node.callFrame.url, node.callFrame.functionName);
    perGroup.set(g, (perGroup.get(g) ?? 0) + us);
    if (storeDriver(node.callFrame.url)) {
      // The store method above the driver's call. SQLite: a transaction's BEGIN/COMMIT has none (async
      // boundary). PostgreSQL: what pg does as the socket answers has none either.
      const sqlite = g.startsWith('SQLite');
      let caller = sqlite
        ? 'BEGIN IMMEDIATE / COMMIT of store.transaction()'
        : '(pg on socket reads: no store method above)';
      for (let at = parent.get(id); at !== undefined; at = parent.get(at)) {
        const up = byId.get(at) as ProfileNode;
        if (up.callFrame.url.includes('/dist/store/repos/')) {
          caller = where(up);
          break;
        }
      }
      if (sqlite && caller.startsWith('BEGIN') && !node.callFrame.url.includes('better-sqlite3'))
        caller = '(other)';
      storeByCaller.set(caller, (storeByCaller.get(caller) ?? 0) + us);
    }
  }
  const pct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)} %`;
  const sorted = (m: Map<string, number>, n: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n);
  const lines = [
    `${name} CPU profile: ${(busy / 1e6).toFixed(1)} s on its main thread outside idle (shares below are of that)`,
    '',
    'by package:',
    ...sorted(perGroup, 15).map(([g, us]) => `  ${pct(us)}  ${g}`),
    '',
    'store driver time by store method:',
    ...sorted(storeByCaller, 12).map(([c, us]) => `  ${pct(us)}  ${c}`),
    '',
    `top ${top} functions by self time:`,
    ...sorted(perFunction, top).map(([f, us]) => `  ${pct(us)}  ${f}`),
  ];
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------------

const fmt = (ms: number) => ms.toFixed(2);
const signed = (ms: number) => `${ms >= 0 ? '+' : ''}${ms.toFixed(2)}`;
const cpu = (r: CaseResult) => (r.cpuPerRequest === undefined ? 'n/a' : r.cpuPerRequest.toFixed(2));
const errorCount = (r: CaseResult) => [...r.errors.values()].reduce((a, b) => a + b, 0);

interface Phase {
  name: 'loaded' | 'unloaded';
  concurrency: number;
  warmup: number;
  total: number;
}

const SQLITE = 'Kiln (SQLite)';
const POSTGRES = 'Kiln (PostgreSQL)';
const KILNS = [SQLITE, POSTGRES];

async function main(): Promise<void> {
  const startLoad = loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');
  const work = mkdtempSync(path.join(tmpdir(), 'kiln-overhead-'));
  scratchDir(work);
  const profileDir = path.join(work, 'profile');
  if (PROFILE) mkdirSync(profileDir);

  // The canned upstream; Kiln on a fresh SQLite data dir and on a fresh PostgreSQL schema, one engine
  // pool each (the upstream); Portkey, its own Node server, in production mode without its log UI.
  const upstream = await startUpstream();
  const kiln = (store: 'sqlite' | 'postgres') =>
    startKiln(`kiln serve (${store})`, {
      dir: path.join(work, store),
      upstreamUrl: upstream.url,
      model: MODEL,
      workers: KILN_WORKERS,
      maxConcurrency: 256,
      postgresUrl: store === 'postgres' ? POSTGRES_URL : undefined,
      storeUrl: store === 'sqlite' ? KILN_STORE_URL : undefined,
      nodeArgs: PROFILE && PROFILE_TARGET === store ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : [],
      logLevel: KILN_LOG_LEVEL,
    });
  const sqlite = await kiln('sqlite');
  const postgres = await kiln('postgres');
  const portkey = await startPortkey();

  const json = { 'content-type': 'application/json' };
  const targets: Array<Target & { pid: number | undefined }> = [
    {
      name: 'direct',
      origin: upstream.url,
      headers: { ...json, authorization: 'Bearer bench' },
      pid: upstream.child.process.pid,
    },
    ...[
      { name: SQLITE, server: sqlite },
      { name: POSTGRES, server: postgres },
    ].map(({ name, server }) => ({
      name,
      origin: server.url,
      headers: { ...json, authorization: `Bearer ${server.key}` },
      pid: server.child.process.pid,
    })),
    {
      name: 'Portkey',
      origin: portkey.url,
      headers: { ...json, ...portkeyHeaders(upstream.url) },
      pid: portkey.child.process.pid,
    },
  ];

  const phases: Phase[] = [
    { name: 'loaded', concurrency: CONCURRENCY, warmup: WARMUP, total: TOTAL },
    ...(UNLOADED > 0 && !PROFILE
      ? [{ name: 'unloaded' as const, concurrency: 1, warmup: 50, total: UNLOADED }]
      : []),
  ];
  const run = Date.now().toString(36);
  const results = new Map<string, CaseResult>();
  const result = (phase: string, mode: string, target: string) =>
    results.get(`${phase}:${mode}:${target}`) as CaseResult;
  for (const phase of phases) {
    for (const stream of [false, true]) {
      const mode = stream ? 'stream' : 'non-stream';
      const pools = targets.map(
        (target) =>
          new Pool(target.origin, {
            connections: phase.concurrency,
            pipelining: 1,
            keepAliveTimeout: 60_000,
          }),
      );
      try {
        const request = (t: number, step: string) => (i: number) =>
          once(
            pools[t] as Pool,
            targets[t] as Target,
            stream,
            `${run}-${phase.name}-${mode}-${t}-${step}-${i}`,
          );
        for (const [t, target] of targets.entries()) {
          const warm = await drive(phase.warmup, phase.concurrency, undefined, request(t, 'warm'));
          if (warm.ms.length === 0) {
            throw new Error(
              `${target.name} ${mode}: every warm-up request failed: ${[...warm.errors.keys()][0]}`,
            );
          }
        }
        // Interleaved rounds, each in another order, so a passing disturbance on the machine is shared.
        const batches: Batch[][] = targets.map(() => []);
        const perRound = Math.ceil(phase.total / ROUNDS);
        for (let round = 0; round < ROUNDS; round++) {
          for (let k = 0; k < targets.length; k++) {
            const t = (round + k) % targets.length;
            const count = Math.min(perRound, phase.total - round * perRound);
            if (count <= 0) continue;
            // Back to speed after waiting its turn (the others' warm-ups took a minute or more).
            await drive(
              Math.min(REWARM, phase.warmup),
              phase.concurrency,
              undefined,
              request(t, `rewarm${round}`),
            );
            const batch = await drive(
              count,
              phase.concurrency,
              (targets[t] as { pid: number | undefined }).pid,
              request(t, 'run'),
              round * perRound,
            );
            (batches[t] as Batch[]).push(batch);
          }
        }
        for (const [t, target] of targets.entries()) {
          const r = pool(batches[t] as Batch[]);
          results.set(`${phase.name}:${mode}:${target.name}`, r);
          console.log(
            `${phase.name.padEnd(8)} c=${String(phase.concurrency).padEnd(3)} ${mode.padEnd(10)} ${target.name.padEnd(17)} ${Math.round(r.rps).toString().padStart(6)} req/s  p50 ${fmt(r.p50)} ms  p99 ${fmt(r.p99)} ms${stream ? `  first chunk p50 ${fmt(r.firstP50)} ms` : ''}  CPU ${cpu(r)} ms/req  ok ${r.ok}/${phase.total}`,
          );
          // Each round's CPU per request, to tell a round the host disturbed from a steady cost.
          const rounds = (batches[t] as Batch[]).map((b) =>
            b.cpu === undefined || b.ms.length === 0 ? 'n/a' : (b.cpu / b.ms.length).toFixed(2),
          );
          console.log(`  CPU ms/req by round: ${rounds.join(', ')}`);
          for (const [message, count] of r.errors) console.log(`  ${count} × ${message}`);
        }
      } finally {
        await Promise.all(pools.map((p) => p.close()));
      }
    }
  }

  await Promise.all([portkey.child.stop(), sqlite.stop(), postgres.stop(), upstream.child.stop()]);

  if (PROFILE) {
    const profiled = PROFILE_TARGET === 'postgres' ? POSTGRES : SQLITE;
    const file = readdirSync(profileDir).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`${profiled} wrote no CPU profile`);
    const kept = path.join(tmpdir(), `kiln-overhead-${run}.cpuprofile`);
    writeFileSync(kept, readFileSync(path.join(profileDir, file)));
    console.log(
      `\n${summariseProfile(profiled, kept)}\n\nfull profile: ${kept} (no section written while profiling)`,
    );
    return;
  }

  const tables: string[] = [];
  const verdicts: string[] = [];
  const mark = (ok: boolean) => (ok ? 'met' : '**missed**');
  for (const mode of ['non-stream', 'stream']) {
    const direct = result('loaded', mode, 'direct');
    const rows = targets.map((target) => {
      const r = result('loaded', mode, target.name);
      const added =
        target.name === 'direct' ? '— | —' : `${signed(r.p50 - direct.p50)} | ${signed(r.p99 - direct.p99)}`;
      const first = mode === 'stream' ? ` ${fmt(r.firstP50)} |` : '';
      return `| ${target.name} | ${Math.round(r.rps)} | ${fmt(r.p50)} | ${fmt(r.p99)} | ${added} |${first} ${cpu(r)} | ${errorCount(r)} |`;
    });
    const header =
      mode === 'stream'
        ? '| target | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | first chunk p50 ms | CPU ms/req | errors |\n|---|---|---|---|---|---|---|---|---|'
        : '| target | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | CPU ms/req | errors |\n|---|---|---|---|---|---|---|---|';
    tables.push(
      `### ${mode === 'stream' ? 'Stream (`stream: true`, latency to `data: [DONE]`)' : 'Non-stream (sync)'}, ${CONCURRENCY} in flight\n\n${header}\n${rows.join('\n')}`,
    );

    const portkey = result('loaded', mode, 'Portkey');
    for (const name of KILNS) {
      const kiln = result('loaded', mode, name);
      const p50Ratio = (kiln.p50 - direct.p50) / (portkey.p50 - direct.p50);
      const p99Ratio = (kiln.p99 - direct.p99) / (portkey.p99 - direct.p99);
      const rpsRatio = kiln.rps / portkey.rps;
      verdicts.push(
        `- ${mode}: ${name} adds ${signed(kiln.p99 - direct.p99)} ms at p99, ${p99Ratio.toFixed(2)} × Portkey's ${signed(portkey.p99 - direct.p99)} ms (target < 0.5: ${mark(p99Ratio < 0.5)}); at p50 ${p50Ratio.toFixed(2)} × Portkey's. It sustains ${rpsRatio.toFixed(2)} × Portkey's requests/s (target ≥ 2: ${mark(rpsRatio >= 2)}).`,
      );
    }
    const onSqlite = result('loaded', mode, SQLITE);
    const onPostgres = result('loaded', mode, POSTGRES);
    const cpuRatio = (onPostgres.cpuPerRequest ?? Number.NaN) / (onSqlite.cpuPerRequest ?? Number.NaN);
    verdicts.push(
      `- ${mode}: ${POSTGRES} uses ${cpu(onPostgres)} ms CPU per request, ${cpuRatio.toFixed(2)} × ${SQLITE}'s ${cpu(onSqlite)} ms (target ≤ 1.5: ${mark(cpuRatio <= 1.5)}).`,
    );
    if (mode === 'non-stream') {
      const rpsRatio = onSqlite.rps / portkey.rps;
      verdicts.push(
        `- non-stream: ${SQLITE} uses ${cpu(onSqlite)} ms CPU per request (target ≤ 0.35: ${mark((onSqlite.cpuPerRequest ?? Number.NaN) <= 0.35)}) and sustains ${rpsRatio.toFixed(2)} × Portkey's requests/s (target ≥ 4: ${mark(rpsRatio >= 4)}).`,
      );
    }
  }
  if (phases.some((p) => p.name === 'unloaded')) {
    const rows: string[] = [];
    for (const mode of ['non-stream', 'stream']) {
      const direct = result('unloaded', mode, 'direct');
      for (const target of targets) {
        const r = result('unloaded', mode, target.name);
        const added =
          target.name === 'direct'
            ? '— | —'
            : `${signed(r.p50 - direct.p50)} | ${signed(r.p99 - direct.p99)}`;
        rows.push(
          `| ${mode} | ${target.name} | ${fmt(r.p50)} | ${fmt(r.p99)} | ${added} | ${cpu(r)} | ${errorCount(r)} |`,
        );
      }
    }
    tables.push(
      `### One request at a time (${UNLOADED} per row after 50 warm-up): the latency each hop adds without queueing\n\n| mode | target | p50 ms | p99 ms | added p50 ms | added p99 ms | CPU ms/req | errors |\n|---|---|---|---|---|---|---|---|\n${rows.join('\n')}`,
    );
  }

  const body = `## Gateway overhead: Kiln and Portkey against a direct call

${new Date().toISOString().slice(0, 10)} · ${machine()} · \`npm run bench:overhead\`

The same fixed load sent to a canned OpenAI-compatible upstream directly, through Kiln on SQLite, through
Kiln on PostgreSQL and through the Portkey gateway (\`@portkey-ai/gateway\` 1.15.2), for
\`POST /v1/chat/completions\` without and with \`stream: true\` (with \`stream_options.include_usage\`).
Each is a process of its own, all on this machine over loopback, sharing its CPUs (and, for the
PostgreSQL Kiln, with the PostgreSQL server):

- the upstream, \`bench/upstream.ts\`: node:http answering at once with a fixed small \`chat.completion\`,
  or 7 \`chat.completion.chunk\` events, the usage chunk and \`data: [DONE]\`, all written together;
- \`kiln serve\` ×2, the same configuration on two stores: ${KILN_STORE_URL ? `store \`${KILN_STORE_URL}\` (diagnostic run)` : 'a fresh SQLite data dir'}, and a fresh
  schema on PostgreSQL (\`${POSTGRES_URL}\`, \`store.pool_size\` at its default, dropped after); each
  with one engine pool (\`serves: unique\`) on the upstream with \`max_concurrency: 256\`,
  \`jobs.workers: ${KILN_WORKERS}\`, and \`KILN_LOG_LEVEL=${KILN_LOG_LEVEL}\` (the default is \`info\`, which logs lines per
  request); the admin key;
- Portkey: its Node server (\`build/start-server.js\`) with \`NODE_ENV=production --headless\`, reached with
  \`x-portkey-provider: openai\` and \`x-portkey-custom-host\` on the upstream. \`bench/portkey.ts\` starts it
  with one shim for the @hono/node-server npm resolves here (Portkey-AI/gateway#1389, which otherwise fails
  every stream with 500); note that Portkey's stream relay sleeps 25 ms before its first event by design;
- the load generator (this script): an undici keep-alive pool with one connection per request in flight.

${CONCURRENCY} requests in flight, ${WARMUP} warm-up (so that V8 has optimised each gateway's request path, as
after hours of serving: after 3,000, it still compiled about 35 of Kiln's functions during the measured requests)
then ${TOTAL} measured requests per row, in ${ROUNDS} rounds interleaved
across the targets (in a different order each round) and pooled. Each round follows ${REWARM} unmeasured
requests to the same target: otherwise a gateway's first round comes straight after sitting out the others'
warm-ups, and half a minute without traffic costs a Kiln about twice the CPU for its next thousand
requests (docs/operations.md, "After a quiet spell"). Each request has a unique prompt
(so Kiln's prefix tracker sees no shared prefix); every response is checked — status 200, the expected
content, for a stream the usage chunk and \`data: [DONE]\` last — and failures count as errors. Added = the
target's latency minus the direct call's at the same percentile. CPU ms/req = CPU time of the target's
process (the upstream's for direct; the Kiln process alone, not the PostgreSQL server, for the
PostgreSQL Kiln) over the measured requests, from /proc (the scheduler's nanoseconds, all threads). The first chunk arrives with
the rest here, since the upstream writes the whole stream at once. Load average when the run began: ${startLoad}
(other work on the machine shows in the figures; the CPU columns are the steadier comparison).

${tables.join('\n\n')}

Against the targets at ${CONCURRENCY} in flight — each Kiln adds less than half of Portkey's p99 overhead and sustains at
least twice its requests/s; on PostgreSQL, Kiln uses at most 1.5 × the CPU per request it uses on SQLite;
synchronously, Kiln on SQLite uses at most 0.35 ms CPU per request and sustains at least 4 × Portkey's
requests/s (both set for 32 in flight):

${verdicts.join('\n')}`;
  publishSection('overhead', body, WRITE);
}

await runBench(main);
