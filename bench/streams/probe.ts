/**
 * A diagnostic for bench/streams.ts, writing nothing: one relay (`bare`, `fastify` — the bare relay
 * behind Fastify, bench/streams/fastify-relay.ts — `sqlite` or `postgres`) on an upstream of its own,
 * warmed up, then measured runs of the trickling workload. For each run it prints
 * the relay's CPU by thread, user and system apart, and its read and write syscalls per relayed chunk
 * (from /proc), besides the client's figures, when the run's worst gaps (the 1 % at or above the
 * p99) ended, by 100 ms of the run, and the gap p99 while streams were still starting (until the last
 * one's first content) and after. The third round of docs/streams-history.md comes from it.
 *
 * Run as `npx tsx bench/streams/probe.ts sqlite` after `npm run build`. Environment: PROBE_N (256
 * streams), PROBE_CHUNKS (100 per stream), PROBE_WARMUP_ROUNDS (8), PROBE_RUNS (1), PROBE_NODE_ARGS
 * (node options for the relay, e.g. `--perf-basic-prof`), PROBE_ATTACH (a shell command started for
 * each run, `{pid}` replaced by the relay's and stopped with SIGINT after it, e.g.
 * `perf record -g -p {pid} -o perf.data`), PROBE_LOG (a file the relay's stdout and stderr are
 * appended to, e.g. for `PROBE_NODE_ARGS=--trace-gc-nvp`).
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { runBench, startUpstream } from '../lib.js';
import { runStreams } from './client.js';
import { startRelay } from './targets.js';

const env = process.env;
const kind = process.argv[2] ?? 'sqlite';
const N = Number(env.PROBE_N ?? 256);
const CHUNKS = Number(env.PROBE_CHUNKS ?? 100);
const WARMUP_ROUNDS = Number(env.PROBE_WARMUP_ROUNDS ?? 8);
const RUNS = Number(env.PROBE_RUNS ?? 1);
const NODE_ARGS = (env.PROBE_NODE_ARGS ?? '').split(' ').filter(Boolean);
const MODEL = 'bench-model';

/** User and system CPU ms of each thread of `pid`, by `name#tid`. */
function threadTimes(pid: number): Map<string, { user: number; system: number }> {
  const times = new Map<string, { user: number; system: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime and stime, fields 14 and 15 of stat(5), in clock ticks of 10 ms.
      times.set(`${name}#${tid}`, { user: Number(fields[11]) * 10, system: Number(fields[12]) * 10 });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return times;
}

/** Read and write syscalls of `pid` so far (/proc/<pid>/io). */
function syscalls(pid: number): { reads: number; writes: number } {
  const io = Object.fromEntries(
    readFileSync(`/proc/${pid}/io`, 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.split(': ') as [string, string]),
  );
  return { reads: Number(io.syscr), writes: Number(io.syscw) };
}

async function main(): Promise<void> {
  const upstream = await startUpstream([`--chunks=${CHUNKS}`, '--gap-ms=20']);
  // The relay's output to a file, through a shell that execs node with it redirected.
  const wrapper = env.PROBE_LOG ? ['sh', '-c', `exec "$0" "$@" >> '${env.PROBE_LOG}' 2>&1`] : undefined;
  const relay = await startRelay(kind, upstream.url, MODEL, { nodeArgs: NODE_ARGS, wrapper });
  const pid = relay.target.pid as number;
  const workload = { model: MODEL, chunks: CHUNKS };
  try {
    for (let round = 0; round < WARMUP_ROUNDS; round++)
      await runStreams(relay.target, N, workload, `warm-${round}`);
    for (let run = 0; run < RUNS; run++) {
      const attached = env.PROBE_ATTACH
        ? spawn('sh', ['-c', env.PROBE_ATTACH.replaceAll('{pid}', String(pid))], { stdio: 'inherit' })
        : undefined;
      if (attached) await new Promise((resolve) => setTimeout(resolve, 300));
      const threadsBefore = threadTimes(pid);
      const callsBefore = syscalls(pid);
      const r = await runStreams(relay.target, N, workload, `run-${run}`);
      const callsAfter = syscalls(pid);
      const threads = [...threadTimes(pid)]
        .map(([thread, t]) => {
          const before = threadsBefore.get(thread) ?? { user: 0, system: 0 };
          return { thread, user: t.user - before.user, system: t.system - before.system };
        })
        .filter((t) => t.user + t.system > 0)
        .map((t) => `${t.thread} user ${t.user} ms, system ${t.system} ms`);
      attached?.kill('SIGINT');
      console.log(
        `${kind} n=${N}: CPU ${r.cpuPerChunkUs?.toFixed(1)} µs/chunk, TTFT p99 ${r.ttftP99.toFixed(1)} ms, gap p99 ${r.gapP99.toFixed(1)} ms, ${r.chunks} chunks`,
      );
      console.log(
        `  per chunk: ${((callsAfter.reads - callsBefore.reads) / r.chunks).toFixed(2)} read and ${((callsAfter.writes - callsBefore.writes) / r.chunks).toFixed(2)} write syscalls`,
      );
      console.log(`  threads: ${threads.join('; ')}`);
      const worst = (r.worstGaps ?? []).map(([ms, n]) => `${ms}: ${n}`).join(', ');
      console.log(`  gaps at or above the p99, by 100 ms of the run: ${worst}`);
      const p99 = (ms: number | undefined) =>
        ms === undefined || Number.isNaN(ms) ? 'none' : `${ms.toFixed(1)} ms`;
      console.log(
        `  gap p99 while streams were still starting ${p99(r.gapP99Starting)}, after ${p99(r.gapP99Started)}`,
      );
    }
  } finally {
    await relay.stop();
    await upstream.child.stop();
  }
}

await runBench(main);
