import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

/** Latency summary of a list of millisecond samples. */
export function summarise(samples: number[]): { n: number; median: number; p99: number; mean: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
  return {
    n: sorted.length,
    median: at(0.5),
    p99: at(0.99),
    mean: sorted.reduce((s, x) => s + x, 0) / sorted.length,
  };
}

/** The middle of `xs`, or the mean of the two middle ones. */
export function median(xs: readonly number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Runs `request` `total` times with `concurrency` in flight; answers per-request latencies and throughput. */
export async function load(total: number, concurrency: number, request: (i: number) => Promise<void>) {
  const samples: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const t0 = performance.now();
        await request(i);
        samples.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { ...summarise(samples), rps: total / seconds };
}

export function machine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  return `${os.cpus().length} × ${cpu}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.platform()} ${os.release()}, Node ${process.version}`;
}

/** Writes the section `name` of docs/benchmarks.md, or with `write` false only prints it. */
export function publishSection(name: string, body: string, write: boolean): void {
  if (!write) {
    console.log(`\n${body}`);
    return;
  }
  writeSection(name, body);
  console.log(`\nwrote the ${name} section of docs/benchmarks.md`);
}

/** Runs a benchmark's `main`: a failure is printed and sets the exit code; children and schemas go either way. */
export async function runBench(main: () => Promise<void>): Promise<void> {
  try {
    await main();
  } catch (error) {
    console.error(error);
    process.exitCode = 1;
  } finally {
    await tearDown();
  }
}

/** Replaces the section `name` of docs/benchmarks.md (between its markers) with `body`. */
export function writeSection(name: string, body: string): void {
  const file = path.join(import.meta.dirname, '..', 'docs', 'benchmarks.md');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    text =
      '# Benchmarks\n\nFigures written by `npm run bench`; each section says when and on what machine it ran.\n';
  }
  const start = `<!-- bench:${name} -->`;
  const end = `<!-- /bench:${name} -->`;
  const section = `${start}\n${body.trim()}\n${end}`;
  const pattern = new RegExp(`${start}[\\s\\S]*?${end}`);
  text = pattern.test(text) ? text.replace(pattern, section) : `${text.trimEnd()}\n\n${section}\n`;
  writeFileSync(file, text);
}

/** Child processes, scratch directories and PostgreSQL schemas of a bench: gone however it ends. */
export const children = new Set<ChildProcess>();
const scratch = new Set<string>();
/** Schema name → the database URL it was made in. */
const schemas = new Map<string, string>();

/** A directory removed when the bench ends. */
export function scratchDir(dir: string): string {
  scratch.add(dir);
  return dir;
}

/** A fresh schema name on `url`, dropped by dropSchema or tearDown (a Kiln on it creates it). */
export function scratchSchema(url: string, prefix: string): string {
  const schema = `${prefix}_${randomBytes(6).toString('hex')}`;
  schemas.set(schema, url);
  return schema;
}

/** Drops a scratch schema; warns instead of failing, as it runs while a bench ends. */
export async function dropSchema(schema: string): Promise<void> {
  const url = schemas.get(schema);
  if (url === undefined) return;
  schemas.delete(schema);
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } catch (error) {
    console.warn(`could not drop schema ${schema}: ${(error as Error).message}`);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Kills the children still running and removes the scratch directories (also done at exit). */
export function cleanUp(): void {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
}

/** cleanUp, then the scratch schemas dropped (which the synchronous exit handler cannot do). */
export async function tearDown(): Promise<void> {
  cleanUp();
  for (const schema of [...schemas.keys()]) await dropSchema(schema);
}
process.on('exit', cleanUp);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    // At most 10 s for the schemas; a second signal ends the process at once.
    setTimeout(() => process.exit(130), 10_000).unref();
    void tearDown().finally(() => process.exit(130));
  });
}

/** The repository root: benches run their children from here. */
export const root = path.join(import.meta.dirname, '..');

/** The environment without the caller's KILN_* settings, so the bench's configuration is the one in force. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('KILN_')) env[key] = value;
  return { ...env, ...extra };
}

/** A child process of a bench. */
export interface Child {
  name: string;
  process: ChildProcess;
  /** The end of what it wrote, for the error when it dies. */
  output(): string;
  /** How long it may take to answer: 30 s, or 10 minutes under a wrapper as slow as valgrind. */
  readySeconds: number;
  stop(): Promise<void>;
}

/**
 * Starts `node <args>` from the repository root, tracked so that it dies with the bench; `wrapper`
 * runs node under another program (`valgrind …`).
 */
export function startChild(
  name: string,
  args: string[],
  env: Record<string, string>,
  onStdout?: (text: string) => void,
  wrapper: readonly string[] = [],
): Child {
  const [command, ...prefix] = [...wrapper, process.execPath];
  const child = spawn(command as string, [...prefix, ...args], {
    cwd: root,
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString()).slice(-4000);
  };
  child.stdout?.on('data', (chunk: Buffer) => {
    keep(chunk);
    onStdout?.(chunk.toString());
  });
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    name,
    process: child,
    output: () => tail,
    readySeconds: wrapper.length > 0 ? 600 : 30,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      }
      children.delete(child);
    },
  };
}

/** Polls `url` until it answers 200; fails when the child exits first or after its `readySeconds`. */
export async function ready(child: Child, url: string): Promise<void> {
  const seconds = child.readySeconds;
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (child.process.exitCode !== null || child.process.signalCode !== null) {
      throw new Error(`${child.name} exited before it was ready:\n${child.output()}`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {}
    if (Date.now() > deadline)
      throw new Error(`${child.name} not ready at ${url} after ${seconds} s:\n${child.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A free port on 127.0.0.1, for a child to listen on. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

const TICK_MS = (() => {
  try {
    return 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  } catch {
    return 10;
  }
})();

/**
 * CPU time a process has used so far, in ms: the scheduler's count in nanoseconds, summed over its
 * threads (/proc/<pid>/task/<tid>/schedstat), so that a short run is measured as finely as a long
 * one; where the kernel keeps no such count, user + system time from /proc/<pid>/stat, in clock ticks
 * of 10 ms. Undefined where /proc is not there. A thread that ends between two readings takes its
 * time with it: Node's threads (V8's and libuv's) live as long as the process.
 */
export function cpuMs(pid: number | undefined): number | undefined {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // The thread ended between the listing and the read.
      }
    }
    if (ns > 0) return ns / 1e6;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return undefined;
  }
}

/** A child process serving HTTP on 127.0.0.1. */
export interface Server {
  child: Child;
  url: string;
}

/** The canned upstream (bench/upstream.ts, given `flags`) in a process of its own, once it answers. */
export async function startUpstream(flags: string[] = []): Promise<Server> {
  const port = await freePort();
  const child = startChild(
    'canned upstream',
    ['--import', 'tsx', 'bench/upstream.ts', `--port=${port}`, ...flags],
    {},
  );
  const url = `http://127.0.0.1:${port}`;
  await ready(child, `${url}/health`);
  return { child, url };
}

/** The Portkey gateway (bench/portkey.ts), in production mode without its log UI, once it answers. */
export async function startPortkey(): Promise<Server> {
  const port = await freePort();
  const child = startChild(
    'portkey gateway',
    ['--import', 'tsx', 'bench/portkey.ts', `--port=${port}`, '--headless'],
    { NODE_ENV: 'production' },
  );
  const url = `http://127.0.0.1:${port}`;
  await ready(child, `${url}/`);
  return { child, url };
}

/** What a request through Portkey carries to reach `upstreamUrl` as an OpenAI provider. */
export const portkeyHeaders = (upstreamUrl: string): Record<string, string> => ({
  authorization: 'Bearer bench',
  'x-portkey-provider': 'openai',
  'x-portkey-custom-host': `${upstreamUrl}/v1`,
});

export interface KilnSettings {
  /** Its config file and data dir go here. */
  dir: string;
  upstreamUrl: string;
  /** Served under the same name as the upstream knows it by. */
  model: string;
  workers: number;
  maxConcurrency: number;
  /** A PostgreSQL database: Kiln runs on a fresh schema of it, dropped when it stops. Else SQLite. */
  postgresUrl?: string | undefined;
  /** Diagnostic: KILN_STORE_URL for a SQLite Kiln (e.g. `sqlite::memory:`). */
  storeUrl?: string | undefined;
  /** Extra node options (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /** Another checkout whose built `bin/kiln.js` runs instead of this one's (bench/ab.ts). */
  checkout?: string;
  /** Runs node under this program (bench/streams/instructions.ts: valgrind), slower to start. */
  wrapper?: string[];
  logLevel: string;
}

export interface Kiln extends Server {
  /** The admin key. */
  key: string;
  /** Stops the process, then drops its schema (PostgreSQL). */
  stop(): Promise<void>;
}

/**
 * The node options a `kiln` bin's shebang names (`#!/usr/bin/env -S node …`): the gateway is measured
 * as `kiln serve`, the image and `npm start` run it.
 */
function binNodeOptions(kilnBin: string): string[] {
  const shebang = /^#!\/usr\/bin\/env -S node (.+)\n/.exec(readFileSync(kilnBin, 'utf8'));
  return shebang?.[1]?.split(' ') ?? [];
}

/** `kiln serve` with one engine pool (`serves: unique`) on the upstream, once /readyz answers. */
export async function startKiln(name: string, s: KilnSettings): Promise<Kiln> {
  const port = await freePort();
  const dataDir = path.join(s.dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const schema = s.postgresUrl ? scratchSchema(s.postgresUrl, 'bench') : undefined;
  const configFile = path.join(s.dir, 'kiln.yaml');
  writeFileSync(
    configFile,
    `host: 127.0.0.1
port: ${port}
data_dir: ${JSON.stringify(dataDir)}
${s.postgresUrl ? `store:\n  url: ${JSON.stringify(s.postgresUrl)}\n  schema: ${schema}\n` : ''}jobs:
  workers: ${s.workers}
engines:
  canned:
    serves: unique
    replicas: ['${s.upstreamUrl}']
    models: { ${s.model}: ${s.model} }
    max_concurrency: ${s.maxConcurrency}
`,
  );
  const kilnBin = path.join(s.checkout ?? root, 'bin', 'kiln.js');
  const child = startChild(
    name,
    [...binNodeOptions(kilnBin), ...(s.nodeArgs ?? []), kilnBin, 'serve'],
    {
      KILN_CONFIG: configFile,
      KILN_LOG_LEVEL: s.logLevel,
      ...(s.storeUrl ? { KILN_STORE_URL: s.storeUrl } : {}),
    },
    undefined,
    s.wrapper,
  );
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await child.stop();
    if (schema) await dropSchema(schema);
  };
  try {
    await ready(child, `${url}/readyz`);
  } catch (error) {
    await stop();
    throw error;
  }
  const key = readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim();
  return { child, url, key, stop };
}
