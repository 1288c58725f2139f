/**
 * A stream's fixed cost, for bench/streams.ts: runs of streams of one content chunk each (the
 * upstream stops at `max_tokens`), whose CPU per stream is what a start, three events and an end
 * cost a target. The TTFT target rests on it: when 256 streams start together, the last one's first
 * chunk waits for the CPU of every start before it.
 */
import { median } from '../lib.js';
import { errorCount, type RunResult, runStreams, type StreamTarget } from './client.js';

const WARMUP_ROUNDS = 3;

/** CPU µs per stream of one content chunk: the median of a target's runs, undefined without /proc. */
export type StartCosts = Map<string, number | undefined>;

/** CPU of one run per stream, µs. */
const perStream = (r: RunResult) =>
  r.cpuPerChunkUs === undefined ? undefined : (r.cpuPerChunkUs * r.chunks) / r.streams;

/**
 * `runs` runs of `streams` one-chunk streams per target, going round the targets in turn as the main
 * runs do; a run with an error throws, as its figure would not be a stream's whole cost.
 */
export async function measureStarts(
  targets: readonly StreamTarget[],
  runs: number,
  streams: number,
  model: string,
  report: (r: RunResult) => void,
): Promise<StartCosts> {
  const costs = new Map<string, number[]>(targets.map((t) => [t.name, []]));
  // Unmeasured rounds first: a short run right after long ones would also measure what those left
  // behind (their garbage collected, their connections closed).
  for (let i = 0; i < WARMUP_ROUNDS; i++)
    for (const target of targets) await runStreams(target, streams, { model, chunks: 1 }, `start-warm-${i}`);
  for (let i = 0; i < runs; i++) {
    for (const target of targets) {
      const r = await runStreams(target, streams, { model, chunks: 1 }, `start-${i}`);
      report(r);
      if (errorCount(r) > 0) throw new Error(`${target.name}: ${[...r.errors.keys()][0]}`);
      const cost = perStream(r);
      if (cost !== undefined) costs.get(target.name)?.push(cost);
    }
  }
  return new Map(
    targets.map((t) => {
      const xs = costs.get(t.name) ?? [];
      return [t.name, xs.length > 0 ? median(xs) : undefined];
    }),
  );
}

/** The section's paragraph and table of start costs, with the bare relay's as the floor. */
export function startsTable(
  costs: StartCosts,
  runs: number,
  streams: number,
  names: { bare: string; direct: string },
): string {
  const floor = costs.get(names.bare);
  const rows = [...costs].map(([name, cost]) => {
    const relay = name !== names.bare && name !== names.direct;
    const beyond = relay && cost !== undefined && floor !== undefined ? `+${(cost - floor).toFixed(0)}` : '—';
    return `| ${name} | ${cost === undefined ? 'n/a' : cost.toFixed(0)} | ${beyond} |`;
  });
  return `**A stream's fixed cost.** After the runs above, ${WARMUP_ROUNDS} unmeasured rounds and then ${runs} runs of ${streams}
streams of one content chunk each per target (\`max_tokens: 1\`; the upstream stops there), taken in turn:
CPU per stream (its start, three data events and its end; for direct, the upstream's), the median of each
target's runs. When ${streams} streams start together, the last one's first chunk waits for about that much
CPU for every start before it.

| target | CPU µs per stream | beyond the bare relay, µs |
|---|---|---|
${rows.join('\n')}`;
}
