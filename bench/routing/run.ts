/**
 * One measured run: fresh simulated replicas, one or more gateways on a fresh PostgreSQL schema with
 * the policy under test, the workload's load, the replicas' cache counters before and after.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { type Child, cpuMs, scratchDir, summarise } from '../lib.js';
import { type CacheCounters, cacheCounters, hitRate, oracleHitRate, scrape } from './cache.js';
import { type Gateway, type LoadResult, runLoad } from './load.js';
import { readAdminKey, type SimSettings, sleep, startGateway, startSim } from './processes.js';
import type { Workload } from './workloads.js';

export interface RunSettings {
  sim: Omit<SimSettings, 'kvBlocks'>;
  kvBlocks: number;
  storeUrl: string;
  workers: number;
  poolSize: number;
  maxConcurrency: number;
  concurrency: number;
  deadlineMs: number;
  requestTimeoutMs: number;
  /** The model clients ask for. */
  model: string;
  /** Diagnostic: write every request's record here, one JSON file per run. */
  dumpDir: string;
  /** Diagnostic: the pool's `routing.balance_abs_threshold` (Kiln's default when undefined). */
  balanceAbsThreshold: number | undefined;
  /** Extra node options for the gateways (diagnostics). */
  gatewayNodeArgs: string[];
  work: string;
}

export interface RunResult {
  workload: string;
  policy: string;
  gateways: number;
  ok: number;
  failures: Map<string, number>;
  hitRate: number;
  oracle: number;
  rps: number;
  ttftP50: number;
  ttftP99: number;
  seconds: number;
  perReplica: number[];
  /** Distinct replicas the requests of each system prompt went to, averaged over the system prompts. */
  replicasPerPrefix: number;
  /** The gateways' own view, summed over them: cached tokens predicted and reported; undefined if unreadable. */
  predicted: number | undefined;
  reported: number | undefined;
  /** Where the hit rate came from. */
  source: string;
  /** The 1-minute load average as the load began. */
  loadAverage: number;
  /** CPU seconds used during the load: the simulator's process, the gateways', this one's; undefined without /proc. */
  cpu: { sim: number; gateways: number; client: number } | undefined;
  notes: string[];
}

async function dropSchema(storeUrl: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: storeUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** Waits (at most 10 s) until every gateway reports the KV capacity the replicas were started with. */
async function waitForCapacity(
  gateways: Gateway[],
  expected: number,
  replicas: number,
): Promise<string | undefined> {
  const deadline = Date.now() + 10_000;
  let seen: number | undefined;
  for (;;) {
    let all = true;
    for (const g of gateways) {
      const metrics = await scrape(g.url, { authorization: `Bearer ${g.key}` });
      seen = metrics?.get('kiln_replica_kv_capacity_tokens');
      if (seen !== expected * replicas) all = false;
    }
    if (all) return undefined;
    if (Date.now() > deadline)
      return `the gateway reported kiln_replica_kv_capacity_tokens summing to ${seen} after 10 s, not ${expected * replicas}`;
    await sleep(200);
  }
}

export async function measure(
  workload: Workload,
  policy: string,
  gatewayCount: number,
  s: RunSettings,
): Promise<RunResult> {
  const notes: string[] = [];
  const children: Child[] = [];
  const schema = `bench_routing_${randomBytes(6).toString('hex')}`;
  const dir = scratchDir(path.join(s.work, `${workload.name}-${policy}-${gatewayCount}`));
  let load: LoadResult;
  let before: CacheCounters;
  let after: CacheCounters;
  let predicted: number | undefined;
  let reported: number | undefined;
  let urls: string[];
  let cpu: RunResult['cpu'];
  let loadAverage = Number.NaN;
  try {
    const sim = await startSim({ ...s.sim, kvBlocks: s.kvBlocks });
    children.push(sim.child);
    urls = sim.urls;
    const gateways: Gateway[] = [];
    let key = '';
    for (let i = 0; i < gatewayCount; i++) {
      // One after the other: the first creates the schema and the admin key.
      const started = await startGateway(`kiln serve ${i + 1}`, path.join(dir, `gateway-${i + 1}`), {
        storeUrl: s.storeUrl,
        schema,
        workers: s.workers,
        poolSize: s.poolSize,
        model: s.model,
        upstreamModel: s.sim.model,
        replicaUrls: urls,
        maxConcurrency: s.maxConcurrency,
        policy,
        nodeArgs: s.gatewayNodeArgs,
        balanceAbsThreshold: s.balanceAbsThreshold,
      });
      children.push(started.child);
      if (i === 0) key = readAdminKey(started.dataDir);
      gateways.push({ url: started.url, key });
    }
    const capacity = await waitForCapacity(gateways, s.kvBlocks * s.sim.blockTokens, urls.length);
    if (capacity) notes.push(capacity);
    before = await cacheCounters(urls, s.sim.blockTokens);
    const pids = children.map((c) => c.process.pid);
    const cpuBefore = pids.map(cpuMs);
    const clientBefore = process.cpuUsage();
    loadAverage = loadavg()[0] ?? Number.NaN;
    load = await runLoad(workload.sessions, gateways, {
      model: s.model,
      maxTokens: workload.maxTokens,
      concurrency: s.concurrency,
      deadlineMs: s.deadlineMs,
      requestTimeoutMs: s.requestTimeoutMs,
    });
    const cpuAfter = pids.map(cpuMs);
    const client = process.cpuUsage(clientBefore);
    const used = cpuAfter.map((ms, i) =>
      ms === undefined || cpuBefore[i] === undefined ? undefined : (ms - (cpuBefore[i] as number)) / 1000,
    );
    if (used.every((u) => u !== undefined)) {
      const [simCpu, ...gatewayCpu] = used as number[];
      cpu = {
        sim: simCpu as number,
        gateways: gatewayCpu.reduce((a, b) => a + b, 0),
        client: (client.user + client.system) / 1e6,
      };
    }
    after = await cacheCounters(urls, s.sim.blockTokens);
    if (!after.source.startsWith('vllm:')) notes.push(`hit rate from ${after.source} (no vllm: counters)`);
    const views = await Promise.all(gateways.map((g) => scrape(g.url, { authorization: `Bearer ${g.key}` })));
    const total = (name: string) => {
      const values = views.map((metrics) => metrics?.get(name));
      return values.every((v) => v !== undefined)
        ? values.reduce((a: number, b) => a + (b as number), 0)
        : undefined;
    };
    predicted = total('kiln_replica_cached_tokens_predicted_total');
    reported = total('kiln_replica_cached_tokens_reported_total');
  } finally {
    for (const child of children.reverse()) await child.stop();
    await dropSchema(s.storeUrl, schema).catch((error: unknown) => {
      console.warn(`could not drop schema ${schema}: ${(error as Error).message}`);
    });
  }
  // Sessions sharing a system prompt share the string: number them by it.
  const prefixOf = new Map<string, number>();
  const prefix = workload.sessions.map((session) => {
    if (!prefixOf.has(session.system)) prefixOf.set(session.system, prefixOf.size);
    return prefixOf.get(session.system) as number;
  });
  const homes = new Map<number, Set<number>>();
  for (const r of load.records) {
    if (r.replica === undefined) continue;
    const p = prefix[r.session] as number;
    if (!homes.has(p)) homes.set(p, new Set());
    homes.get(p)?.add(r.replica);
  }
  const replicasPerPrefix =
    [...homes.values()].reduce((sum, set) => sum + set.size, 0) / Math.max(1, homes.size);
  if (s.dumpDir) {
    const records = load.records.map((r) => ({ ...r, prefix: prefix[r.session] }));
    writeFileSync(
      path.join(s.dumpDir, `${workload.name}-${policy}-${gatewayCount}.json`),
      JSON.stringify(records),
    );
  }
  const ttft = load.ttft.length > 0 ? summarise(load.ttft) : { median: Number.NaN, p99: Number.NaN };
  return {
    workload: workload.name,
    policy,
    gateways: gatewayCount,
    ok: load.ok,
    failures: load.failures,
    hitRate: hitRate(before, after),
    oracle: oracleHitRate(load.submitted, s.sim.blockTokens),
    rps: load.ok / load.seconds,
    ttftP50: ttft.median,
    ttftP99: ttft.p99,
    seconds: load.seconds,
    perReplica: urls.map((_, i) => load.perReplica.get(i) ?? 0),
    replicasPerPrefix,
    predicted,
    reported,
    source: after.source,
    cpu,
    loadAverage,
    notes,
  };
}

/** A run that could not be measured (a process would not start, say): every request counts as failed. */
export function failedRun(workload: Workload, policy: string, gateways: number, error: unknown): RunResult {
  const message = String((error as Error).message ?? error)
    .split('\n')
    .filter((line) => line.trim() !== '')
    .join(' ')
    .slice(0, 200);
  return {
    workload: workload.name,
    policy,
    gateways,
    ok: 0,
    failures: new Map([[`run not measured: ${message}`, workload.requests]]),
    hitRate: Number.NaN,
    oracle: Number.NaN,
    rps: Number.NaN,
    ttftP50: Number.NaN,
    ttftP99: Number.NaN,
    seconds: Number.NaN,
    perReplica: [],
    replicasPerPrefix: Number.NaN,
    predicted: undefined,
    reported: undefined,
    source: 'none',
    cpu: undefined,
    loadAverage: Number.NaN,
    notes: [],
  };
}
