/** The `routing` section of docs/benchmarks.md: a table per workload and the issue's targets, computed. */
import { cpus } from 'node:os';
import type { RunResult } from './run.js';
import type { Workload } from './workloads.js';

const KILN = 'cache-aware';
const TITLES: Record<string, string> = { gsp: 'Generated shared prefix' };

const failureCount = (r: RunResult) => [...r.failures.values()].reduce((a, b) => a + b, 0);
const fixed = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');
const ms = (x: number) => (Number.isFinite(x) ? String(Math.round(x)) : 'n/a');

/** The run of `policy` with `gateways` gateways on `workload`, if it was measured. */
function find(runs: RunResult[], workload: string, policy: string, gateways: number): RunResult | undefined {
  return runs.find((r) => r.workload === workload && r.policy === policy && r.gateways === gateways);
}

/** The oracle shown for a workload: the one of Kiln's 1-gateway run, else of the first run. */
function workloadOracle(runs: RunResult[], workload: string): number {
  const own = runs.filter((r) => r.workload === workload);
  return (find(runs, workload, KILN, 1) ?? own[0])?.oracle ?? Number.NaN;
}

export function workloadTable(workload: Workload, runs: RunResult[]): string {
  const own = runs.filter((r) => r.workload === workload.name);
  const rr = find(runs, workload.name, 'round-robin', 1);
  const rows = own.map((r) => {
    const base = find(runs, workload.name, 'round-robin', r.gateways) ?? rr;
    const failures = failureCount(r);
    return `| ${r.policy === KILN ? `**${r.policy}** (Kiln)` : r.policy} | ${r.gateways} | ${fixed(r.hitRate, 3)} | ${fixed(r.hitRate / r.oracle, 2)} | ${fixed(r.rps, 1)} | ${base ? fixed(r.rps / base.rps, 2) : 'n/a'} | ${ms(r.ttftP50)} | ${ms(r.ttftP99)} | ${failures === 0 ? '0' : `**${failures}**`} |`;
  });
  const oracle = workloadOracle(runs, workload.name);
  rows.push(
    `| oracle (one replica holding everything) | — | ${fixed(oracle, 3)} | 1.00 | — | — | — | — | — |`,
  );
  const detail = own.map((r) => {
    const view =
      r.predicted === undefined || r.reported === undefined
        ? 'n/a'
        : `${Math.round(r.predicted).toLocaleString('en')} / ${Math.round(r.reported).toLocaleString('en')}`;
    const cpu = r.cpu
      ? `${fixed(r.cpu.sim, 1)} / ${fixed(r.cpu.gateways, 1)} / ${fixed(r.cpu.client, 1)}`
      : 'n/a';
    return `| ${r.policy} | ${r.gateways} | ${r.perReplica.join(' / ')} | ${fixed(r.replicasPerPrefix, 2)} | ${view} | ${fixed(r.seconds, 1)} | ${fixed(r.loadAverage, 1)} | ${cpu} |`;
  });
  const failures = own.flatMap((r) =>
    [...r.failures].map(
      ([message, count]) => `- ${r.policy}, ${r.gateways} gateway(s): ${count} × ${message}`,
    ),
  );
  const notes = own.flatMap((r) => r.notes.map((n) => `- ${r.policy}, ${r.gateways} gateway(s): ${n}`));
  return `### ${workload.title}

${workload.description}.

| policy | gateways | hit rate | × oracle | throughput req/s | × round-robin | TTFT p50 ms | TTFT p99 ms | failures |
|---|---|---|---|---|---|---|---|---|
${rows.join('\n')}

Where requests went (from \`x-kiln-route\`): requests per replica, and the distinct replicas each
system prompt's requests went to, on average; the gateways' own view of the cache (cached prompt
tokens the router predicted / the replicas reported, \`kiln_replica_cached_tokens_{predicted,reported}_total\`);
the run's wall time, the machine's 1-minute load average as it began, and the CPU time used meanwhile
by the simulator's process, the gateways and the load generator (the machine has ${cpus().length} cores):

| policy | gateways | requests per replica | replicas per prompt | predicted / reported cached tokens | seconds | load avg | CPU s: sim / gateways / load |
|---|---|---|---|---|---|---|---|
${detail.join('\n')}
${failures.length > 0 ? `\nFailures:\n\n${failures.join('\n')}\n` : ''}${notes.length > 0 ? `\nNotes:\n\n${notes.join('\n')}\n` : ''}`;
}

/** Each target of the issue, met or not, from the figures measured; a target whose runs are missing says so. */
export function targets(runs: RunResult[], workloads: Workload[]): string[] {
  const lines: string[] = [];
  const mark = (ok: boolean, clean: boolean) =>
    `${ok ? 'met' : '**not met**'}${clean ? '' : ' (a run it compares had failures)'}`;
  const clean = (...rs: RunResult[]) => rs.every((r) => failureCount(r) === 0);
  const name = (w: string) => workloads.find((x) => x.name === w)?.title ?? TITLES[w] ?? w;

  const kilnGsp = find(runs, 'gsp', KILN, 1);
  if (kilnGsp) {
    const ratio = kilnGsp.hitRate / kilnGsp.oracle;
    lines.push(
      `- Kiln's hit rate ≥ 0.95 × oracle on ${name('gsp')}: ${fixed(kilnGsp.hitRate, 3)} = ${fixed(ratio, 3)} × the oracle's ${fixed(kilnGsp.oracle, 3)} — ${mark(ratio >= 0.95, clean(kilnGsp))}.`,
    );
  } else lines.push(`- Kiln's hit rate ≥ 0.95 × oracle on ${name('gsp')}: not measured in this run.`);

  const rrGsp = find(runs, 'gsp', 'round-robin', 1);
  if (kilnGsp && rrGsp) {
    const ratio = kilnGsp.rps / rrGsp.rps;
    lines.push(
      `- Kiln's throughput ≥ 1.9 × round-robin's on ${name('gsp')}: ${fixed(kilnGsp.rps, 1)} vs ${fixed(rrGsp.rps, 1)} req/s = ${fixed(ratio, 2)} × — ${mark(ratio >= 1.9, clean(kilnGsp, rrGsp))}.`,
    );
  } else lines.push(`- Kiln's throughput ≥ 1.9 × round-robin's on ${name('gsp')}: not measured in this run.`);

  for (const w of workloads) {
    const kiln = find(runs, w.name, KILN, 1);
    const sglang = find(runs, w.name, 'sglang', 1);
    const strict = w.name === 'zipf';
    const target = `Kiln's TTFT p99 ${strict ? '<' : '≤'} sglang's on ${w.title}`;
    if (!kiln || !sglang) {
      lines.push(`- ${target}: not measured in this run.`);
      continue;
    }
    const ok = strict ? kiln.ttftP99 < sglang.ttftP99 : kiln.ttftP99 <= sglang.ttftP99;
    lines.push(
      `- ${target}: ${ms(kiln.ttftP99)} ms vs ${ms(sglang.ttftP99)} ms (${fixed(kiln.ttftP99 / sglang.ttftP99, 2)} ×) — ${mark(ok, clean(kiln, sglang))}.`,
    );
  }

  for (const w of workloads) {
    const one = find(runs, w.name, KILN, 1);
    const two = find(runs, w.name, KILN, 2);
    const target = `With 2 gateways Kiln's hit rate ≥ 0.9 × its 1-gateway hit rate on ${w.title}`;
    if (!one || !two) {
      lines.push(`- ${target}: not measured in this run.`);
      continue;
    }
    const ratio = two.hitRate / one.hitRate;
    lines.push(
      `- ${target}: ${fixed(two.hitRate, 3)} vs ${fixed(one.hitRate, 3)} = ${fixed(ratio, 3)} × — ${mark(ratio >= 0.9, clean(one, two))}.`,
    );
  }
  return lines;
}
