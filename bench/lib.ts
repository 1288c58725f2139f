import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';

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

/** Child processes and scratch directories of a bench: killed and removed however it ends. */
export const children = new Set<ChildProcess>();
const scratch = new Set<string>();

/** A directory removed when the bench ends. */
export function scratchDir(dir: string): string {
  scratch.add(dir);
  return dir;
}

/** Kills the children still running and removes the scratch directories (also done at exit). */
export function cleanUp(): void {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
}
process.on('exit', cleanUp);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    cleanUp();
    process.exit(130);
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
  stop(): Promise<void>;
}

/** Starts `node <args>` from the repository root, tracked so that it dies with the bench. */
export function startChild(
  name: string,
  args: string[],
  env: Record<string, string>,
  onStdout?: (text: string) => void,
): Child {
  const child = spawn(process.execPath, args, {
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

/** Polls `url` until it answers 200; fails when the child exits first or after 30 s. */
export async function ready(child: Child, url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
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
      throw new Error(`${child.name} not ready at ${url} after 30 s:\n${child.output()}`);
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
