/**
 * A diagnostic for the fixed cost of a stream, writing nothing to docs: where a relay's instructions
 * go for streams of one content chunk, counted by valgrind's callgrind (every thread, JIT code
 * included) while the runs' streams are in flight and at no other time. Each run is written as a
 * profile of its own, its JIT frames named from V8's perf map, so that `callgrind_annotate` shows
 * Kiln's functions; the eighth round of docs/streams-history.md comes from it.
 *
 * What it is good for: exact call counts per stream (statements, JSON calls, inline-cache misses)
 * and a profile that no other load on the host disturbs. What it is not: an A/B of two builds. The
 * lowest run (one without a garbage collection) is the path's own cost, yet it moves by up to a tenth
 * between two processes of the same build, as V8's compiler decides differently; CPU time from
 * bench:ab remains the judge of speed.
 *
 * Run as `npx tsx bench/streams/instructions.ts sqlite` after `npm run build` (`bare`, `fastify`,
 * `sqlite` or `postgres`; valgrind installed). Environment: COUNT_N (64 streams per run; 4 for what
 * a chunk costs: at 64, a relay running 50 times slower under callgrind falls behind its upstream,
 * its reads carry several events, and a chunk counts cheaper than it runs natively),
 * COUNT_CHUNKS (1 content chunk per stream; with more, the difference between two counts divided by
 * the difference in chunks is what a chunk costs), COUNT_GAP_MS (20 between an engine's chunks),
 * COUNT_WARMUP_ROUNDS (100, uninstrumented and so several times faster, until the JIT has settled),
 * COUNT_RUNS (6), COUNT_NODE_ARGS (more node options for the relay). Node runs about 50 times slower
 * under callgrind: the defaults take two minutes.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { median, runBench, startUpstream } from '../lib.js';
import { errorCount, runStreams } from './client.js';
import { startRelay } from './targets.js';

const env = process.env;
const kind = process.argv[2] ?? 'sqlite';
const N = Number(env.COUNT_N ?? 64);
const WARMUP_ROUNDS = Number(env.COUNT_WARMUP_ROUNDS ?? 100);
const RUNS = Number(env.COUNT_RUNS ?? 6);
const CHUNKS = Number(env.COUNT_CHUNKS ?? 1);
const GAP_MS = Number(env.COUNT_GAP_MS ?? 20);
// The perf map names JIT code in the profiles.
const NODE_ARGS = ['--perf-basic-prof', ...(env.COUNT_NODE_ARGS ?? '').split(' ').filter(Boolean)];
const MODEL = 'bench-model';

const dir = mkdtempSync(path.join(tmpdir(), 'kiln-count-'));
const VALGRIND = [
  'valgrind',
  '--tool=callgrind',
  `--callgrind-out-file=${dir}/callgrind.%p`,
  '--quiet',
  // Warm-up runs uninstrumented; instrumentation is on only while a run's streams are in flight.
  '--instr-atstart=no',
];

const k = (n: number | undefined) => `${((n ?? Number.NaN) / 1000).toFixed(1)}k`;

function callgrindControl(pid: number, ...args: string[]): string {
  return execFileSync('callgrind_control', [...args, String(pid)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
}

/** The instructions each thread of `pid` has executed so far, by callgrind's thread number (1 is main). */
function instructions(pid: number): Map<number, number> {
  const out = callgrindControl(pid, '-e', 'Ir');
  if (!/Totals:/.test(out)) throw new Error(`no instruction count in callgrind_control's answer:\n${out}`);
  // A line per thread that has run instrumented code: `Th 1  462,934,787`, `Th12  33,354`.
  const threads = [...out.matchAll(/^\s*Th\s*(\d+)\s+([\d,]+)\s*$/gm)];
  return new Map(threads.map((m) => [Number(m[1]), Number((m[2] as string).replaceAll(',', ''))]));
}

/** Rewrites the JIT addresses callgrind names functions by (`0x…`) with the names V8's perf map gives them. */
function nameJitFrames(profile: string, perfMap: string): void {
  const entries = readFileSync(perfMap, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [start, size, ...name] = line.split(' ');
      const from = Number.parseInt(start as string, 16);
      return { from, to: from + Number.parseInt(size as string, 16), name: name.join('_') };
    })
    // Stable: of two entries at one address, the later (code that replaced the first) stays last.
    .sort((a, b) => a.from - b.from);
  const nameOf = (address: number): string | undefined => {
    let lo = 0;
    let hi = entries.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if ((entries[mid] as (typeof entries)[number]).from <= address) lo = mid;
      else hi = mid - 1;
    }
    const entry = entries[lo];
    return entry && entry.from <= address && address < entry.to ? entry.name : undefined;
  };
  const text = readFileSync(profile, 'utf8').replace(
    /^(c?fn=\(\d+\) )(.+)$/gm,
    (_line, head: string, name: string) =>
      head + name.replace(/0x([0-9a-f]{8,16})/g, (hex, digits) => nameOf(Number.parseInt(digits, 16)) ?? hex),
  );
  writeFileSync(profile, text);
}

async function main(): Promise<void> {
  const upstream = await startUpstream([`--chunks=${CHUNKS}`, `--gap-ms=${GAP_MS}`]);
  const relay = await startRelay(kind, upstream.url, MODEL, { nodeArgs: NODE_ARGS, wrapper: VALGRIND });
  const pid = relay.target.pid as number;
  const workload = { model: MODEL, chunks: CHUNKS };
  // Per stream, by run: the main thread's instructions, and every thread's (V8's helpers compile
  // and collect garbage).
  const mainThread: number[] = [];
  const all: number[] = [];
  try {
    for (let i = 0; i < WARMUP_ROUNDS; i++) await runStreams(relay.target, N, workload, `warm-${i}`);
    let retries = 3;
    let dumps = 0;
    while (mainThread.length < RUNS) {
      let before = new Map<number, number>();
      let counted = { main: 0, all: 0 };
      const r = await runStreams(relay.target, N, workload, `run-${mainThread.length}`, {
        before: async () => {
          callgrindControl(pid, '-i', 'on');
          before = instructions(pid);
        },
        after: async () => {
          const after = instructions(pid);
          callgrindControl(pid, '-i', 'off');
          callgrindControl(pid, '-d');
          dumps++;
          const grown = (t: number) => Math.max(0, (after.get(t) ?? 0) - (before.get(t) ?? 0));
          // A thread that ended in between leaves its number to the next; count only growth.
          counted = { main: grown(1) / N, all: [...after.keys()].reduce((a, t) => a + grown(t), 0) / N };
        },
      });
      if (errorCount(r) > 0) {
        // So slow a relay can miss its engine's health check (2 s) and find it down until the next.
        const error = [...r.errors.keys()][0] ?? '';
        if (retries-- === 0) throw new Error(`${kind}: ${error}`);
        console.log(`a run not counted (${error.slice(0, 80)}); again in 6 s`);
        await new Promise((resolve) => setTimeout(resolve, 6000));
        continue;
      }
      mainThread.push(counted.main);
      all.push(counted.all);
      console.log(
        `run ${mainThread.length} (callgrind.${pid}.${dumps}): ${k(counted.main)} instructions per stream ` +
          `on the main thread, ${k(counted.all)} on every thread`,
      );
    }
  } finally {
    await relay.stop();
    await upstream.child.stop();
  }
  const perfMap = `/tmp/perf-${pid}.map`;
  if (existsSync(perfMap))
    for (let n = 1; existsSync(`${dir}/callgrind.${pid}.${n}`); n++)
      nameJitFrames(`${dir}/callgrind.${pid}.${n}`, perfMap);
  console.log(
    `${kind}: ${k(Math.min(...mainThread))} instructions per stream in the lowest run, median ${k(median(mainThread))} ` +
      `(${RUNS} runs of ${N}; every thread: lowest ${k(Math.min(...all))}, median ${k(median(all))})`,
  );
  console.log(`profiles in ${dir}: callgrind_annotate --inclusive=yes ${dir}/callgrind.${pid}.<run>`);
}

await runBench(main);
