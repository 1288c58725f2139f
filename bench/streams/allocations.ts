/**
 * A diagnostic for the garbage a relay makes, writing nothing to docs: what it allocates for a
 * stream's start and end and for each relayed chunk, by function (V8's sampling heap profiler, freed
 * objects included), and the collections that garbage costs while 256 streams run. The eleventh
 * round of docs/streams-history.md comes from it.
 *
 * Two measured rounds after the warm-up, each profiled on its own: streams of one content chunk (what
 * a stream's start and end allocate, per stream), then streams of CHUNKS chunks (what a chunk
 * allocates is the difference, per chunk). For each: the heap bytes, the functions that allocated
 * most, themselves and with what they called, and every collection with its pause.
 *
 * Run as `npx tsx bench/streams/allocations.ts sqlite` after `npm run build` (`bare`, `fastify`,
 * `sqlite` or `postgres`). Environment: ALLOC_N (256 streams), ALLOC_CHUNKS (100), ALLOC_WARMUP_ROUNDS
 * (8), ALLOC_TOP (20 functions listed). The profiler samples one allocation in 256 bytes on average:
 * figures under a few hundred bytes per stream are noise. The profiler slows the process and its
 * collections: take pause lengths from a run without it (`--trace-gc`). `post` (node:inspector) in the lists is the
 * sampler's own, not the relay's.
 */
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { root, runBench, startUpstream } from '../lib.js';
import { errorCount, runStreams, type StreamTarget } from './client.js';
import { startRelay } from './targets.js';

const env = process.env;
const kind = process.argv[2] ?? 'sqlite';
const N = Number(env.ALLOC_N ?? 256);
const CHUNKS = Number(env.ALLOC_CHUNKS ?? 100);
const WARMUP_ROUNDS = Number(env.ALLOC_WARMUP_ROUNDS ?? 8);
const TOP = Number(env.ALLOC_TOP ?? 20);
const MODEL = 'bench-model';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: ProfileNode[];
}

interface Sampled {
  profile: { head: ProfileNode; samples: Array<{ size: number; nodeId: number }> };
  gcs: Array<{ kind: number; ms: number }>;
}

/** Bytes allocated in all, and by function: by itself, and with everything it called. */
interface Allocations {
  total: number;
  self: Map<string, number>;
  inclusive: Map<string, number>;
  gcs: Sampled['gcs'];
}

function frameName({ functionName, url, lineNumber }: ProfileNode['callFrame']): string {
  const file = url.startsWith('file://') ? path.relative(root, new URL(url).pathname) : url;
  return `${functionName || '(anonymous)'} ${file || '(native)'}:${lineNumber + 1}`;
}

function allocations(sampled: Sampled): Allocations {
  const stacks = new Map<number, string[]>();
  const walk = (node: ProfileNode, stack: string[]) => {
    const here = [...stack, frameName(node.callFrame)];
    stacks.set(node.id, here);
    for (const child of node.children ?? []) walk(child, here);
  };
  walk(sampled.profile.head, []);
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let total = 0;
  for (const { size, nodeId } of sampled.profile.samples) {
    const stack = stacks.get(nodeId) ?? ['(unknown)'];
    total += size;
    const own = stack.at(-1) as string;
    self.set(own, (self.get(own) ?? 0) + size);
    // A recursive function counts once per sample.
    for (const name of new Set(stack)) inclusive.set(name, (inclusive.get(name) ?? 0) + size);
  }
  return { total, self, inclusive, gcs: sampled.gcs };
}

/** Profiles written so far, in the order the sampler numbers them. */
const profiles: string[] = [];

/** Reads a JSON file once it is whole: the sampler writes it once the profile is in. */
async function readWhenWritten(file: string): Promise<unknown> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      return JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`${kind}: no profile in ${file}: ${error}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** One measured round with the profiler on, read back from the sampler's file. */
async function profiledRound(target: StreamTarget, chunks: number, tag: string): Promise<Allocations> {
  const pid = target.pid as number;
  const signal = async () => {
    process.kill(pid, 'SIGUSR2');
  };
  const r = await runStreams(target, N, { model: MODEL, chunks }, tag, { before: signal, after: signal });
  if (errorCount(r) > 0) throw new Error(`${kind}: ${[...r.errors.keys()][0]}`);
  const file = path.join(tmpdir(), `kiln-allocations-${pid}-${profiles.length + 1}.json`);
  profiles.push(file);
  const sampled = (await readWhenWritten(file)) as Sampled | { error: string };
  if ('error' in sampled) throw new Error(`${kind}: ${sampled.error}`);
  return allocations(sampled);
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(2)} KB`;

function report(title: string, per: number, a: Allocations, base?: Allocations): void {
  const minus = (map: Map<string, number>, baseMap: Map<string, number> | undefined) =>
    [...new Set([...map.keys(), ...(baseMap?.keys() ?? [])])]
      .map((name) => [name, ((map.get(name) ?? 0) - (baseMap?.get(name) ?? 0)) / per] as const)
      .sort((x, y) => y[1] - x[1])
      .slice(0, TOP);
  console.log(`\n${title}: ${kb((a.total - (base?.total ?? 0)) / per)}`);
  console.log('  by function, itself:');
  for (const [name, bytes] of minus(a.self, base?.self))
    console.log(`    ${kb(bytes).padStart(10)}  ${name}`);
  console.log('  by function, with what it called:');
  for (const [name, bytes] of minus(a.inclusive, base?.inclusive))
    console.log(`    ${kb(bytes).padStart(10)}  ${name}`);
}

function collections(title: string, a: Allocations): void {
  // PerformanceObserver's kinds: 1 a scavenge (young generation), 2 and 4 mark-compact, 8 weak callbacks.
  const young = a.gcs.filter((gc) => gc.kind === 1).map((gc) => gc.ms);
  const other = a.gcs.filter((gc) => gc.kind !== 1).map((gc) => gc.ms);
  const list = (xs: number[]) => xs.map((ms) => ms.toFixed(1)).join(', ') || 'none';
  console.log(
    `${title}: scavenges ${young.length} (ms: ${list(young)}); others ${other.length} (ms: ${list(other)})`,
  );
}

async function main(): Promise<void> {
  const sampler = path.join(import.meta.dirname, 'heap-sampler.mjs');
  const upstream = await startUpstream([`--chunks=${CHUNKS}`, '--gap-ms=20']);
  const relay = await startRelay(kind, upstream.url, MODEL, { nodeArgs: [`--import=${sampler}`] });
  try {
    for (let round = 0; round < WARMUP_ROUNDS; round++)
      await runStreams(relay.target, N, { model: MODEL, chunks: CHUNKS }, `warm-${round}`);
    const starts = await profiledRound(relay.target, 1, 'starts');
    const streams = await profiledRound(relay.target, CHUNKS, 'streams');
    console.log(`${kind}, ${N} streams at once`);
    collections(`  streams of one chunk`, starts);
    collections(`  streams of ${CHUNKS} chunks`, streams);
    report(`Allocated per stream of one content chunk (its start, its end, 3 events)`, N, starts);
    // A stream of one content chunk carries the role chunk, the content and the last chunks too.
    report(`Allocated per further content chunk`, N * (CHUNKS - 1), streams, starts);
  } finally {
    await relay.stop();
    await upstream.child.stop();
    for (const file of profiles) rmSync(file, { force: true });
  }
}

await runBench(main);
