/**
 * Streaming relays in the production shape: many concurrent streams whose tokens trickle in one by
 * one, sent straight to a canned upstream (bench/upstream.ts in trickle mode), through Kiln on SQLite,
 * through Kiln on PostgreSQL and through the Portkey gateway. Reports time to the first content chunk,
 * the gap between content chunks (and what each gateway adds to both over the direct call), the
 * target's CPU per relayed chunk, failures, the CPU of a stream's start and end (bench/streams/
 * starts.ts), and how many concurrent streams each Kiln relays before its gaps stretch. Run with `npm run bench:streams` (which builds dist/ first); writes the `streams`
 * section of docs/benchmarks.md, ending with bench/streams-notes.md verbatim.
 *
 * Environment: BENCH_STREAMS_N (256 concurrent streams), BENCH_STREAMS_CHUNKS (100 content chunks per
 * stream), BENCH_STREAMS_GAP_MS (20 ms between them), BENCH_STREAMS_WARMUP (N: rounds of that many
 * concurrent streams per target first), BENCH_STREAMS_WARMUP_ROUNDS (8), BENCH_STREAMS_WARMUP_STARTS
 * (16384 one-chunk streams per target before those, BENCH_STREAMS_WARMUP at a time: enough starts for
 * V8 to optimise the start path), BENCH_STREAMS_RUNS (5 measured
 * runs at N per target, the targets taken in turn; each figure is their median), BENCH_STREAMS_REWARM (1
 * unmeasured run on a target just before each of its measured runs), BENCH_STREAMS_POSTGRES_URL (postgres://postgres@127.0.0.1:5432/test; a fresh schema, dropped
 * after), BENCH_STREAMS_RAMP=0 (skips the capacity ramp: 64, 128, … 1024 concurrent streams, then
 * steps of 512), BENCH_STREAMS_MAX (4096: the ramp's last level), BENCH_STREAMS_WRITE=0 (print only), BENCH_STREAMS_PROFILE_DIR (diagnostic: the Kiln
 * targets run under --cpu-prof and write their profiles there; no section is written).
 *
 * Every target is a process of its own on 127.0.0.1 with an upstream process of its own. All are
 * started and warmed up first; the measured runs then go round them in turn, so that this shared
 * machine's drift reaches each alike; the ramp comes last. The ramp needs file descriptors (a Kiln holds two sockets per stream: levels that
 * the open-files limit cannot hold are left out, and said so) and ephemeral ports (a level opens as
 * many connections as streams; loopback reuses TIME_WAIT ports when net.ipv4.tcp_tw_reuse is on).
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import {
  type Kiln,
  machine,
  median,
  portkeyHeaders,
  publishSection,
  runBench,
  type Server,
  scratchDir,
  startKiln,
  startPortkey,
  startUpstream,
} from './lib.js';
import {
  errorCount,
  type RunResult,
  runStreams,
  type StreamTarget,
  type Workload,
} from './streams/client.js';
import { measureStarts, type StartCosts, startsTable } from './streams/starts.js';
import { kilnTarget, type Running, startBareRelay } from './streams/targets.js';

const env = process.env;
const N = Number(env.BENCH_STREAMS_N ?? 256);
const CHUNKS = Number(env.BENCH_STREAMS_CHUNKS ?? 100);
const GAP_MS = Number(env.BENCH_STREAMS_GAP_MS ?? 20);
const WARMUP = Number(env.BENCH_STREAMS_WARMUP ?? N);
const WARMUP_ROUNDS = Number(env.BENCH_STREAMS_WARMUP_ROUNDS ?? 8);
const WARMUP_STARTS = Number(env.BENCH_STREAMS_WARMUP_STARTS ?? 16384);
const RUNS = Math.max(1, Number(env.BENCH_STREAMS_RUNS ?? 5));
/**
 * Unmeasured runs of the workload on a target just before each of its measured runs. A target warmed
 * up early sits out the others' warm-ups, and a Node process that has waited that long spends more CPU
 * on what comes next (docs/operations.md, "After a quiet spell"). Without them, in one run, Kiln's
 * first two runs on SQLite measured 49 µs a chunk against 35–44 in its last three, while Portkey,
 * warmed up last, held steady (docs/streams-history.md, the seventeenth round).
 */
const REWARM = Math.max(0, Number(env.BENCH_STREAMS_REWARM ?? 1));
const POSTGRES_URL = env.BENCH_STREAMS_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RAMP = env.BENCH_STREAMS_RAMP !== '0';
const MAX = Number(env.BENCH_STREAMS_MAX ?? 4096);
const WRITE = env.BENCH_STREAMS_WRITE !== '0';
const PROFILE_DIR = env.BENCH_STREAMS_PROFILE_DIR ?? '';

const MODEL = 'bench-model';
const KILN_LOG_LEVEL = 'warn';
/** jobs.workers' maximum (src/config/schema.ts): a stream is a job, so streams past it wait for a worker. */
const KILN_WORKERS = 1024;
const KILN_MAX_CONCURRENCY = 4096;
/** Capacity: the largest level whose inter-chunk gap p99 exceeds direct's by at most this, without errors. */
const CAPACITY_GAP_MS = 10;
/** A ramp level measures a gateway only while direct keeps the pace there: its median gap within this of G. */
const PACE_SLACK = 1.25;
/** File descriptors a process needs beyond its sockets (files, PostgreSQL, pipes). */
const SPARE_FDS = 256;

const workload: Workload = { model: MODEL, chunks: CHUNKS };

type Kind = 'direct' | 'bare' | 'sqlite' | 'postgres' | 'portkey';
/** Every target, in the order each round of measured runs visits them. */
const KINDS: readonly Kind[] = ['direct', 'bare', 'sqlite', 'postgres', 'portkey'];
const NAMES: Record<Kind, string> = {
  direct: 'direct',
  bare: 'bare Node relay',
  sqlite: 'Kiln (SQLite)',
  postgres: 'Kiln (PostgreSQL)',
  portkey: 'Portkey',
};

/** The soft limit on open files, which the children inherit; Infinity when unknown. */
function openFilesLimit(): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === undefined || soft === 'unlimited' ? Number.POSITIVE_INFINITY : Number(soft);
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/** 64, doubling to 1024, then steps of 512 up to `max` (and `max` itself). */
function rampLevels(max: number): number[] {
  const levels: number[] = [];
  for (let n = 64; n <= max; n = n < 1024 ? n * 2 : n + 512) levels.push(n);
  if (levels.at(-1) !== max && max > 0) levels.push(max);
  return levels;
}

/** Starts a target and waits until it is reachable: what the client needs, and how to stop it. */
async function start(kind: Kind, upstream: Server, work: string): Promise<Running> {
  const json = { 'content-type': 'application/json' };
  if (kind === 'bare') return startBareRelay(NAMES[kind], upstream.url);
  if (kind === 'direct') {
    return {
      target: {
        name: NAMES[kind],
        origin: upstream.url,
        headers: { ...json, authorization: 'Bearer bench' },
        probePath: '/health',
        pid: upstream.child.process.pid,
      },
      stop: async () => undefined,
    };
  }
  if (kind === 'portkey') {
    const portkey = await startPortkey();
    return {
      target: {
        name: NAMES[kind],
        origin: portkey.url,
        headers: { ...json, ...portkeyHeaders(upstream.url) },
        probePath: '/',
        pid: portkey.child.process.pid,
      },
      stop: () => portkey.child.stop(),
    };
  }
  const kiln: Kiln = await startKiln(`kiln serve (${kind})`, {
    dir: scratchDir(path.join(work, kind)),
    upstreamUrl: upstream.url,
    model: MODEL,
    workers: KILN_WORKERS,
    maxConcurrency: KILN_MAX_CONCURRENCY,
    postgresUrl: kind === 'postgres' ? POSTGRES_URL : undefined,
    nodeArgs: PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(PROFILE_DIR)}`] : [],
    logLevel: KILN_LOG_LEVEL,
  });
  return { target: kilnTarget(NAMES[kind], kiln), stop: () => kiln.stop() };
}

const ms = (x: number) => x.toFixed(1);
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
const us = (r: RunResult) => (r.cpuPerChunkUs === undefined ? 'n/a' : r.cpuPerChunkUs.toFixed(1));

function report(r: RunResult): void {
  console.log(
    `${r.target.padEnd(17)} n=${String(r.streams).padEnd(4)}  TTFT p50 ${ms(r.ttftP50)} p99 ${ms(r.ttftP99)} ms  gap p50 ${ms(r.gapP50)} p99 ${ms(r.gapP99)} ms  CPU ${us(r)} µs/chunk (${r.chunks} chunks; client ${r.clientPerChunkUs.toFixed(1)})  errors ${errorCount(r)}  ${r.seconds.toFixed(1)} s`,
  );
  for (const [message, count] of r.errors) console.log(`  ${count} × ${message}`);
}

async function warmUp(target: StreamTarget, run: string): Promise<void> {
  if (WARMUP <= 0) return;
  // Starts first: a function run once per stream needs thousands of calls before V8 optimises it, and
  // one-chunk streams make them quickly.
  for (let started = 0, round = 0; started < WARMUP_STARTS; started += WARMUP, round++) {
    const warm = await runStreams(target, WARMUP, { model: MODEL, chunks: 1 }, `${run}-warm-start-${round}`);
    if (errorCount(warm) === warm.streams)
      throw new Error(`${target.name}: every warm-up stream failed: ${[...warm.errors.keys()][0]}`);
  }
  for (let round = 0; round < WARMUP_ROUNDS; round++) {
    const warm = await runStreams(target, WARMUP, workload, `${run}-warm-${round}`);
    if (errorCount(warm) === warm.streams)
      throw new Error(`${target.name}: every warm-up stream failed: ${[...warm.errors.keys()][0]}`);
  }
}

/** Runs at the same level as one result: each figure the median of the runs', every error counted. */
function medianOf(runs: RunResult[]): RunResult {
  const first = runs[0] as RunResult;
  const of = (figure: (r: RunResult) => number) => median(runs.map(figure));
  const errors = new Map<string, number>();
  for (const r of runs)
    for (const [message, count] of r.errors) errors.set(message, (errors.get(message) ?? 0) + count);
  const cpu = runs.every((r) => r.cpuPerChunkUs !== undefined)
    ? of((r) => r.cpuPerChunkUs as number)
    : undefined;
  return {
    target: first.target,
    streams: first.streams,
    ttftP50: of((r) => r.ttftP50),
    ttftP99: of((r) => r.ttftP99),
    gapP50: of((r) => r.gapP50),
    gapP99: of((r) => r.gapP99),
    chunks: of((r) => r.chunks),
    cpuPerChunkUs: cpu,
    clientPerChunkUs: of((r) => r.clientPerChunkUs),
    errors,
    seconds: of((r) => r.seconds),
  };
}

/** What a target measured: the run at N and, for direct and the Kilns, the ramp's levels. */
interface Measured {
  kind: Kind;
  main: RunResult;
  ramp: RunResult[];
}

/** Whether the client and upstream alone keep the pace at a level (else this machine is the limit). */
const keepsPace = (direct: RunResult) => errorCount(direct) === 0 && direct.gapP50 <= PACE_SLACK * GAP_MS;

/** Whether a Kiln holds a ramp level: no errors, and a gap p99 within CAPACITY_GAP_MS of direct's. */
const holds = (r: RunResult, direct: RunResult) =>
  errorCount(r) === 0 && r.gapP99 - direct.gapP99 <= CAPACITY_GAP_MS;

/** A target started, with an upstream of its own, and warmed up. */
interface Live {
  kind: Kind;
  /** Names this target's runs for the client. */
  run: string;
  running: Running;
  upstream: Server;
}

/** Starts `kind` on an upstream of its own and warms it up; it stays up until `bringDown`. */
async function bringUp(kind: Kind, work: string): Promise<Live> {
  const run = `${Date.now().toString(36)}-${kind}`;
  const upstream = await startUpstream([`--chunks=${CHUNKS}`, `--gap-ms=${GAP_MS}`]);
  let running: Running | undefined;
  try {
    running = await start(kind, upstream, work);
    await warmUp(running.target, run);
    return { kind, run, running, upstream };
  } catch (error) {
    await running?.stop();
    await upstream.child.stop();
    throw error;
  }
}

async function bringDown(live: Live): Promise<void> {
  await live.running.stop();
  await live.upstream.child.stop();
}

/**
 * The ramp on a target already up: direct until it no longer keeps the pace, a Kiln over the levels
 * where direct did, until one does not hold against direct's at the same level.
 */
async function rampOf(live: Live, levels: number[], direct: Measured | undefined): Promise<RunResult[]> {
  const ramp: RunResult[] = [];
  for (const [i, level] of levels.entries()) {
    const paced = direct?.ramp[i];
    if (direct && !(paced && keepsPace(paced))) break;
    const r = await runStreams(live.running.target, level, workload, `${live.run}-ramp-${level}`);
    report(r);
    ramp.push(r);
    if (paced ? !holds(r, paced) : !keepsPace(r)) break;
  }
  return ramp;
}

/**
 * Every target up and warm at once; then the measured runs go round them in turn (each target's
 * first run, then each one's second, …), so that a drift in this shared machine's speed reaches
 * every target alike; then the ramp, direct's first.
 */
async function measureAll(
  levels: number[],
  work: string,
): Promise<{ results: Measured[]; starts: StartCosts }> {
  const live: Live[] = [];
  try {
    for (const kind of KINDS) live.push(await bringUp(kind, work));
    const runs = new Map<Kind, RunResult[]>(KINDS.map((kind) => [kind, []]));
    for (let i = 0; i < RUNS; i++) {
      for (const target of live) {
        for (let w = 0; w < REWARM; w++)
          await runStreams(target.running.target, N, workload, `${target.run}-${i}-rewarm-${w}`);
        const r = await runStreams(target.running.target, N, workload, `${target.run}-${i}`);
        report(r);
        runs.get(target.kind)?.push(r);
      }
    }
    const results: Measured[] = live.map(({ kind }) => ({
      kind,
      main: medianOf(runs.get(kind) as RunResult[]),
      ramp: [],
    }));
    const starts = await measureStarts(
      live.map((target) => target.running.target),
      RUNS,
      N,
      MODEL,
      report,
    );
    const direct = results.find((m) => m.kind === 'direct');
    for (const [i, target] of live.entries()) {
      if (target.kind === 'portkey' || target.kind === 'bare') continue;
      (results[i] as Measured).ramp = await rampOf(
        target,
        levels,
        target.kind === 'direct' ? undefined : direct,
      );
    }
    return { results, starts };
  } finally {
    for (const target of live) await bringDown(target);
  }
}

/** A Kiln's capacity line: its ramp stopped at the first level it did not hold, or where direct lost pace. */
function capacity(m: Measured, direct: Measured, levels: number[], leftOut: number[]): string {
  const directAt = (i: number) => direct.ramp[i] as RunResult;
  const held = m.ramp.filter((r, i) => holds(r, directAt(i)));
  const largest = held.at(-1)?.streams;
  const lostPace = direct.ramp.find((d) => !keepsPace(d))?.streams;
  let verdict: string;
  if (m.ramp.length === 0) verdict = `not measured: direct itself does not keep the pace at ${levels[0]}`;
  else if (largest === undefined)
    verdict = `fewer than ${levels[0]} concurrent streams (the first level already misses)`;
  else if (held.length < m.ramp.length) verdict = `**${largest} concurrent streams**`;
  else if (lostPace !== undefined)
    verdict = `**at least ${largest} concurrent streams**; at ${lostPace} direct itself no longer keeps the pace here`;
  else verdict = `**at least ${largest} concurrent streams** (every level held)`;
  const past =
    (largest ?? 0) > KILN_WORKERS
      ? `; past ${KILN_WORKERS} streams wait for a job worker, as TTFT shows`
      : '';
  const cut = leftOut.length > 0 ? `; levels ${leftOut.join(', ')} left out: open-files limit` : '';
  const steps = m.ramp.map((r, i) => {
    const d = directAt(i);
    return `${r.streams}: gap p99 ${ms(r.gapP99)} ms (${signed(r.gapP99 - d.gapP99)}), TTFT p99 ${ms(r.ttftP99)} ms (${signed(r.ttftP99 - d.ttftP99)}), ${errorCount(r)} errors`;
  });
  return `- ${NAMES[m.kind]}: ${verdict}${past}${cut}. Per level (added over direct at the same level): ${steps.join('; ')}.`;
}

function commandLine(): string {
  const set = Object.keys(env)
    .filter((k) => k.startsWith('BENCH_STREAMS_'))
    .sort()
    .map((k) => `${k}=${env[k]}`);
  return [...set, 'npm run bench:streams'].join(' ');
}

function section(
  { results, starts }: { results: Measured[]; starts: StartCosts },
  levels: number[],
  leftOut: number[],
  startLoad: string,
): string {
  const of = (kind: Kind) => results.find((m) => m.kind === kind) as Measured;
  const direct = of('direct');
  const d = direct.main;
  const rows = results.map(({ kind, main: r }) => {
    const times =
      d.cpuPerChunkUs !== undefined && r.cpuPerChunkUs !== undefined
        ? `${(r.cpuPerChunkUs / d.cpuPerChunkUs).toFixed(1)} ×`
        : 'n/a';
    const upstreamRatio = kind === 'direct' ? '1 ×' : times;
    const ttftAdded = kind === 'direct' ? '—' : signed(r.ttftP99 - d.ttftP99);
    const gapAdded = kind === 'direct' ? '—' : signed(r.gapP99 - d.gapP99);
    return `| ${r.target} | ${us(r)} | ${upstreamRatio} | ${ms(r.ttftP50)} | ${ms(r.ttftP99)} | ${ttftAdded} | ${ms(r.gapP50)} | ${ms(r.gapP99)} | ${gapAdded} | ${errorCount(r)} |`;
  });

  const kilns = [of('sqlite'), of('postgres')].map((m) => m.main);
  const portkey = of('portkey').main;
  const mark = (ok: boolean) => (ok ? 'met' : '**NOT met**');
  const each = (figure: (r: RunResult) => string, ok: (r: RunResult) => boolean) =>
    kilns.map((r) => `${r.target} ${figure(r)} (${mark(ok(r))})`).join(', ');
  const cpuOf = (r: RunResult) => r.cpuPerChunkUs ?? Number.NaN;
  const verdicts = [
    `- CPU per relayed chunk ≤ 35 µs: ${each(
      (r) => `${us(r)} µs`,
      (r) => cpuOf(r) <= 35,
    )}.`,
    `- CPU per relayed chunk ≤ 0.35 × Portkey's ${us(portkey)} µs: ${each(
      (r) => `${(cpuOf(r) / cpuOf(portkey)).toFixed(2)} ×`,
      (r) => cpuOf(r) / cpuOf(portkey) <= 0.35,
    )}.`,
    `- TTFT added at p99 ≤ 100 ms: ${each(
      (r) => `${signed(r.ttftP99 - d.ttftP99)} ms`,
      (r) => r.ttftP99 - d.ttftP99 <= 100,
    )}.`,
    `- The start path ≤ 0.35 ms a stream (what that TTFT comes to), at most a stream of one chunk's CPU above: ${each(
      (r) => `${((starts.get(r.target) ?? Number.NaN) / 1000).toFixed(2)} ms`,
      (r) => (starts.get(r.target) ?? Number.NaN) <= 350,
    )}.`,
    `- Inter-chunk gap added at p99 ≤ 5 ms: ${each(
      (r) => `${signed(r.gapP99 - d.gapP99)} ms`,
      (r) => r.gapP99 - d.gapP99 <= 5,
    )}.`,
  ];
  // The floor in the same runs: what no Node relay here does for less, whatever host the run lands on.
  const bare = of('bare').main;
  const floor = `Against the bare Node relay in the same runs (${us(bare)} µs per chunk, gap p99 added ${signed(
    bare.gapP99 - d.gapP99,
  )} ms, TTFT p99 added ${signed(bare.ttftP99 - d.ttftP99)} ms): ${kilns
    .map(
      (r) =>
        `${r.target} ${(cpuOf(r) / cpuOf(bare)).toFixed(2)} × its CPU per chunk, gap p99 ${signed(
          r.gapP99 - bare.gapP99,
        )} ms and TTFT p99 ${signed(r.ttftP99 - bare.ttftP99)} ms beyond it`,
    )
    .join('; ')}.`;
  const capacities =
    levels.length > 0
      ? `### Capacity

Concurrent streams ramped ${levels.join(', ')} on the same processes after the run above, direct first at
each level while it keeps the pace (no errors, median gap ≤ ${PACE_SLACK} × ${GAP_MS} ms: past that, this client and
the upstream alone saturate the machine's CPUs and the level says nothing of a gateway): direct at
${direct.ramp.map((d) => `${d.streams} gap p50 ${ms(d.gapP50)} p99 ${ms(d.gapP99)} ms`).join(', ')}. A Kiln's capacity is the
largest level before the first whose inter-chunk gap p99 exceeds direct's at that level by more than ${CAPACITY_GAP_MS} ms
or that has any error (its ramp stops there).

${[of('sqlite'), of('postgres')].map((m) => capacity(m, direct, levels, leftOut)).join('\n')}

`
      : '';
  const notesFile = path.join(import.meta.dirname, 'streams-notes.md');
  const notes = existsSync(notesFile) ? `\n\n${readFileSync(notesFile, 'utf8').trim()}` : '';

  return `## Streaming relays: many concurrent streams, tokens trickling in

${new Date().toISOString().slice(0, 10)} · ${machine()} · \`${commandLine()}\`

${N} streams started together, each a \`POST /v1/chat/completions\` with \`stream: true\` and
\`stream_options.include_usage\` and a unique prompt, sent straight to a canned upstream, through a bare
Node relay, through Kiln on SQLite, through Kiln on PostgreSQL and through the Portkey gateway
(\`@portkey-ai/gateway\` 1.15.2).
Each target is a process of its own with an upstream process of its own, on this machine over loopback,
sharing its CPUs with this client; all five are up at once, idle but for the runs sent to them:

- the upstream, \`bench/upstream.ts --chunks=${CHUNKS} --gap-ms=${GAP_MS}\`: node:http answering each stream with
  ${CHUNKS} content chunks, one at once and then one every ${GAP_MS} ms on a timer per stream (one write per event,
  precomputed strings), then the finish chunk, the usage chunk and \`data: [DONE]\`;
- the bare Node relay, \`bench/streams/bare-relay.ts\`: node:http in, an undici dispatch handler out, each
  read from the upstream written onto the client's socket as an HTTP chunk as it arrives — no parsing,
  auth, job or store: the floor for any gateway written in Node, on this machine (no ramp);
- \`kiln serve\` ×2: a fresh SQLite data dir, or a fresh schema on PostgreSQL (\`${POSTGRES_URL}\`, \`store.pool_size\`
  at its default, dropped after); one engine pool (\`serves: unique\`) on the upstream with
  \`max_concurrency: ${KILN_MAX_CONCURRENCY}\`, \`jobs.workers: ${KILN_WORKERS}\` (the most it takes) and \`KILN_LOG_LEVEL=${KILN_LOG_LEVEL}\`; the admin key;
- Portkey: its Node server with \`NODE_ENV=production --headless\`, started by \`bench/portkey.ts\` as in the
  overhead section (Portkey's stream relay sleeps 25 ms before its first event by design);
- the client (this script): an undici pool with one keep-alive connection per stream, all opened before
  the run; each read is timestamped as it arrives (the events it completes share that time) and
  parsed once the run is over.

Each target is warmed up first, so that a gateway's upstream connections are open and its code compiled, as
after hours of serving: ${WARMUP_STARTS} streams of one content chunk, ${WARMUP} at a time (a function run once per stream
needs thousands of calls before V8 optimises it; after 3,000 sync requests it was still optimising about 35 of
Kiln's), then ${WARMUP_ROUNDS} rounds of ${WARMUP} concurrent streams of the measured shape (one round was not enough: the
next rounds measured up to a third less CPU per chunk). Then ${RUNS} measured runs of ${N}
streams per target, going round the targets in turn (each one's first run, then each one's second, …): this
machine's speed drifts, by up to a third within an hour, and taken in turn every target sees the same drift.
Each measured run follows ${REWARM} unmeasured run${REWARM === 1 ? '' : 's'} of the same shape on the same target, so that none is
measured straight after waiting out the others' warm-ups and runs (a Node process that has been quiet spends
more CPU on what comes next: docs/operations.md, "After a quiet spell").
Each figure in the table is the median of a target's ${RUNS} runs'. TTFT = from sending the request to the first chunk carrying content;
gap = between consecutive content chunks of a stream, over every stream; added = the target's figure
minus direct's at the same percentile. CPU µs/chunk = CPU time of the target's process (the upstream's
for direct: the physical limit) over the run, from /proc (the scheduler's nanoseconds, all threads), divided by the data events the client received
other than \`[DONE]\`; × upstream = that over direct's. Every stream is checked — status 200, the expected
content, a usage chunk, \`data: [DONE]\` last — and a failure counts as an error. Load average when the
run began: ${startLoad}.

| target | CPU µs/chunk | × upstream | TTFT p50 ms | TTFT p99 ms | TTFT p99 added ms | gap p50 ms | gap p99 ms | gap p99 added ms | errors |
|---|---|---|---|---|---|---|---|---|---|
${rows.join('\n')}

${startsTable(starts, RUNS, N, { bare: NAMES.bare, direct: NAMES.direct })}

${capacities}Against the targets, at ${N} streams:

${verdicts.join('\n')}

${floor}${notes}`;
}

async function main(): Promise<void> {
  const startLoad = loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');
  console.log(`${machine()}; load average ${startLoad}`);
  const work = scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-streams-')));
  const files = openFilesLimit();
  const all = RAMP ? rampLevels(MAX) : [];
  const levels = all.filter((n) => 2 * n + SPARE_FDS <= files);
  const leftOut = all.filter((n) => !levels.includes(n));
  if (leftOut.length > 0)
    console.log(`open-files limit ${files}: ramp levels ${leftOut.join(', ')} left out (ulimit -n)`);

  const measured = await measureAll(levels, work);
  if (PROFILE_DIR) {
    console.log(`\nKiln CPU profiles in ${PROFILE_DIR} (no section written while profiling)`);
    return;
  }
  const body = section(measured, levels, leftOut, startLoad);
  publishSection('streams', body, WRITE);
}

await runBench(main);
