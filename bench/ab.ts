/**
 * A/B of two builds of Kiln on this machine: this checkout and another (`BENCH_AB_BASE`, a checkout
 * built with `npx tsc -p tsconfig.build.json`, e.g. a `git worktree` of an earlier commit), each a
 * `kiln serve` of its own on the same canned upstream, measured in alternation so that both see the
 * same moments of a machine whose speed drifts. Prints each run and the medians; writes nothing.
 * Run with `BENCH_AB_BASE=../kiln-before npm run bench:ab`.
 *
 * Environment: BENCH_AB_BASE (required), BENCH_AB_STORE (sqlite | postgres), BENCH_AB_MODE (streams:
 * 256 trickling streams of 100 chunks 20 ms apart, as bench/streams.ts; sync or stream: 2000
 * requests at 32 in flight, as bench/overhead.ts), BENCH_AB_ROUNDS (6), BENCH_AB_WARMUP (8 rounds),
 * BENCH_AB_CONCURRENCY (32; sync and stream), BENCH_AB_POSTGRES_URL, BENCH_AB_NODE_ARGS and
 * BENCH_AB_BASE_NODE_ARGS (node options for this build's and the base's process: with this checkout
 * as its own base, `BENCH_AB_BASE=.`, an A/B of a V8 flag).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { cpuMs, type Kiln, load, runBench, scratchDir, startKiln, startUpstream, summarise } from './lib.js';
import { runStreams } from './streams/client.js';
import { kilnTarget } from './streams/targets.js';

const env = process.env;
const BASE = env.BENCH_AB_BASE ?? '';
const STORE = env.BENCH_AB_STORE === 'postgres' ? 'postgres' : 'sqlite';
const MODE = env.BENCH_AB_MODE === 'sync' || env.BENCH_AB_MODE === 'stream' ? env.BENCH_AB_MODE : 'streams';
const ROUNDS = Number(env.BENCH_AB_ROUNDS ?? 6);
const WARMUP = Number(env.BENCH_AB_WARMUP ?? 8);
const CONCURRENCY = Number(env.BENCH_AB_CONCURRENCY ?? 32);
const POSTGRES_URL = env.BENCH_AB_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const nodeArgs = (value: string | undefined) => (value ?? '').split(' ').filter(Boolean);
const STREAMS = 256;
const CHUNKS = 100;
const REQUESTS = 2000;
const MODEL = 'bench-model';

/** One measured round on one build: the figures compared, by name. */
type Figures = Record<string, number>;

const shown = (name: string, value: number) =>
  value.toFixed(name === 'errors' ? 0 : name.startsWith('CPU ms') ? 3 : 1);

/** `streams`: CPU per chunk, TTFT p99 and gap p99 of 256 trickling streams. */
async function streamsRound(kiln: Kiln, tag: string): Promise<Figures> {
  const r = await runStreams(
    kilnTarget(tag, kiln),
    STREAMS,
    { model: MODEL, chunks: CHUNKS },
    `${tag}-${Date.now()}`,
  );
  const errors = [...r.errors.values()].reduce((a, b) => a + b, 0);
  return {
    'CPU µs/chunk': r.cpuPerChunkUs ?? Number.NaN,
    'TTFT p99 ms': r.ttftP99,
    'gap p99 ms': r.gapP99,
    errors,
  };
}

/** `sync` or `stream`: CPU per request and requests/s at CONCURRENCY in flight. */
async function requestsRound(kiln: Kiln, tag: string, total = REQUESTS): Promise<Figures> {
  const pool = new Pool(kiln.url, { connections: CONCURRENCY });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${kiln.key}` };
  let n = 0;
  let errors = 0;
  const before = cpuMs(kiln.child.process.pid) ?? Number.NaN;
  const started = performance.now();
  try {
    await load(total, CONCURRENCY, async () => {
      const body = JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: `${tag} ${n++}` }],
        ...(MODE === 'stream' ? { stream: true } : {}),
      });
      const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers, body });
      await res.body.text();
      if (res.statusCode !== 200) errors++;
    });
  } finally {
    await pool.close();
  }
  const seconds = (performance.now() - started) / 1000;
  const cpu = (cpuMs(kiln.child.process.pid) ?? Number.NaN) - before;
  return { 'CPU ms/req': cpu / total, 'req/s': total / seconds, errors };
}

async function main(): Promise<void> {
  if (!BASE) throw new Error('BENCH_AB_BASE: the other checkout (built) to compare this one with');
  const work = scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-ab-')));
  const upstream = await startUpstream(MODE === 'streams' ? [`--chunks=${CHUNKS}`, '--gap-ms=20'] : []);
  const builds: Array<{ name: string; kiln: Kiln }> = [];
  try {
    for (const [name, checkout, args] of [
      ['base', path.resolve(BASE), nodeArgs(env.BENCH_AB_BASE_NODE_ARGS)],
      ['this', undefined, nodeArgs(env.BENCH_AB_NODE_ARGS)],
    ] as const) {
      const kiln = await startKiln(`kiln serve (${name})`, {
        dir: scratchDir(path.join(work, name)),
        upstreamUrl: upstream.url,
        model: MODEL,
        workers: MODE === 'streams' ? 1024 : 64,
        maxConcurrency: MODE === 'streams' ? 4096 : 256,
        postgresUrl: STORE === 'postgres' ? POSTGRES_URL : undefined,
        logLevel: 'warn',
        checkout,
        nodeArgs: args,
      });
      builds.push({ name, kiln });
    }
    const round = (kiln: Kiln, tag: string) =>
      MODE === 'streams' ? streamsRound(kiln, tag) : requestsRound(kiln, tag);
    for (let i = 0; i < WARMUP; i++) for (const b of builds) await round(b.kiln, `warm-${b.name}`);
    const seen = new Map<string, Figures[]>(builds.map((b) => [b.name, []]));
    for (let i = 0; i < ROUNDS; i++) {
      // Alternate who goes first, so neither always follows the other.
      for (const b of i % 2 === 0 ? builds : [...builds].reverse()) {
        const figures = await round(b.kiln, `${b.name}-${i}`);
        seen.get(b.name)?.push(figures);
        console.log(
          `${b.name.padEnd(4)} ${STORE} ${MODE}  ${Object.entries(figures)
            .map(([k, v]) => `${k} ${shown(k, v)}`)
            .join('  ')}`,
        );
      }
    }
    for (const [name, runs] of seen) {
      const keys = Object.keys(runs[0] ?? {});
      const medians = keys.map((k) => {
        const { median } = summarise(runs.map((r) => r[k] as number));
        return `${k} ${shown(k, median)}`;
      });
      console.log(`median of ${runs.length}: ${name.padEnd(4)} ${medians.join('  ')}`);
    }
  } finally {
    for (const b of builds) await b.kiln.stop();
    await upstream.child.stop();
  }
}

await runBench(main);
