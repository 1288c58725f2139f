import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { openStore, type Store } from '../../src/store/index.js';
import type { StoreCase } from './stores.js';

/** The repository root: children run from here so `--import tsx` and the fixture paths resolve. */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The test server (`test/fixtures/serve.ts`: Kiln plus the `test.sleep` kind), run through tsx. */
export const SERVE_FIXTURE = 'test/fixtures/serve.ts';

/** A pino log line of a child, or `{ text }` for a line that is not JSON. */
export type LogLine = Record<string, unknown>;

export interface KilnProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Every stdout line so far, parsed. */
  readonly lines: LogLine[];
  /** The last few KB of stdout and stderr, for failure messages. */
  output(): string;
  /** Resolves with the first log line (past or future) `match` accepts; rejects on exit or timeout. */
  waitForLine(match: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** Resolves once the process is gone. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Sends `signal` (SIGKILL by default) and waits for the process to be gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Every child still alive, so a failing test cannot leave one behind (see `killAll`). */
const live = new Set<KilnProcess>();

process.once('exit', () => {
  for (const p of live) p.child.kill('SIGKILL');
});

/**
 * Starts `node --import tsx <script> …args` from the repository root. The child's environment is
 * PATH, HOME, TMPDIR and LANG plus `env`: nothing else of the test's (no stray KILN_*) leaks in.
 */
export function spawnKiln(
  env: Record<string, string>,
  args: string[] = [],
  script = SERVE_FIXTURE,
): KilnProcess {
  const childEnv: Record<string, string> = {};
  for (const name of ['PATH', 'HOME', 'TMPDIR', 'LANG']) {
    const value = process.env[name];
    if (value !== undefined) childEnv[name] = value;
  }
  Object.assign(childEnv, env);
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: REPO_ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.pid === undefined) throw new Error(`could not spawn ${script}`);

  const lines: LogLine[] = [];
  const waiters = new Set<() => void>();
  let tail = '';
  let partial = '';
  const keep = (text: string) => {
    tail = (tail + text).slice(-8000);
  };
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    keep(chunk);
    partial += chunk;
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      if (text.trim() === '') continue;
      try {
        lines.push(JSON.parse(text) as LogLine);
      } catch {
        lines.push({ text });
      }
    }
    for (const wake of waiters) wake();
  });
  child.stderr?.setEncoding('utf8').on('data', keep);

  let gone = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      gone = true;
      for (const wake of waiters) wake();
      resolve({ code, signal });
    });
  });

  const proc: KilnProcess = {
    child,
    pid: child.pid,
    lines,
    output: () => tail,
    exited,
    waitForLine(match, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        let seen = 0;
        const check = () => {
          for (; seen < lines.length; seen++) {
            const line = lines[seen] as LogLine;
            if (match(line)) return done(() => resolve(line));
          }
          if (gone) done(() => reject(new Error(`process ${child.pid} exited first; output:\n${tail}`)));
        };
        const timer = setTimeout(
          () =>
            done(() =>
              reject(new Error(`no such line from ${child.pid} in ${timeoutMs} ms; output:\n${tail}`)),
            ),
          timeoutMs,
        );
        const done = (settle: () => void) => {
          clearTimeout(timer);
          waiters.delete(check);
          settle();
        };
        waiters.add(check);
        check();
      });
    },
    async kill(signal = 'SIGKILL') {
      if (!gone) child.kill(signal);
      await exited;
    },
  };
  live.add(proc);
  void exited.then(() => live.delete(proc));
  return proc;
}

/** SIGKILLs every child still alive and waits until they are gone. */
export async function killAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.kill('SIGKILL')));
}

/** Starts the HTTP server and answers it with the URL it logged once listening. */
export async function startServerProcess(
  env: Record<string, string>,
  timeoutMs = 20_000,
): Promise<KilnProcess & { url: string }> {
  const proc = spawnKiln(env);
  const line = await proc.waitForLine((l) => l.msg === 'kiln is listening', timeoutMs);
  return Object.assign(proc, { url: String(line.url) });
}

/** Starts a `--worker` process (workers, sweeper and webhook delivery, no HTTP) and waits until it runs. */
export async function startWorkerProcess(
  env: Record<string, string>,
  timeoutMs = 20_000,
): Promise<KilnProcess> {
  const proc = spawnKiln(env, ['--worker']);
  await proc.waitForLine((l) => l.msg === 'kiln worker is running', timeoutMs);
  return proc;
}

/** A world for tests that run Kiln as child processes on one data dir and one fresh store. */
export interface ProcessWorld {
  readonly dataDir: string;
  /** The children's environment: the world's, short leases, and `extra` over them. */
  env(extra?: Record<string, string>): Record<string, string>;
  /** The admin key the first child wrote to the data dir. */
  adminKey(): string;
  /** The test's own connection to the store the children share (opened after they migrated it). */
  store(): Store;
  /** Kills every child, closes the test's connection, and removes the store and the data dir. */
  cleanup(): Promise<void>;
}

/**
 * A temporary data dir (named `prefix…`) and a fresh store of `storeCase`, for children that
 * listen on any port, hold a job's lease 2 s and poll for jobs every 200 ms, so that one killed
 * is noticed quickly.
 */
export function processWorld(storeCase: StoreCase, prefix: string): ProcessWorld {
  const dataDir = mkdtempSync(path.join(tmpdir(), prefix));
  const fresh = storeCase.fresh();
  let store: Store | undefined;
  return {
    dataDir,
    env: (extra = {}) => ({
      KILN_DATA_DIR: dataDir,
      KILN_PORT: '0',
      KILN_STORE_URL: fresh.store.url,
      KILN_STORE_SCHEMA: fresh.store.schema,
      KILN_JOBS_LEASE_SECONDS: '2',
      KILN_JOBS_POLL_INTERVAL_MS: '200',
      KILN_LOG_LEVEL: 'info',
      ...extra,
    }),
    adminKey: () => readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim(),
    store() {
      store ??= openStore({ ...fresh.store, pool_size: 2 });
      return store;
    },
    async cleanup() {
      await killAll();
      await store?.close().catch(() => undefined);
      await fresh.cleanup();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Polls `probe` until it answers a truthy value; throws `describe()` after `timeoutMs`. */
export async function waitUntil<T>(
  probe: () => Promise<T> | T,
  options: { timeoutMs: number; intervalMs?: number; describe?: () => string | Promise<string> },
): Promise<NonNullable<T>> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) {
      const what = options.describe ? await options.describe() : 'condition';
      throw new Error(`timed out after ${options.timeoutMs} ms waiting for ${what}`);
    }
    await sleep(options.intervalMs ?? 50);
  }
}

/** Runs `task` over `items` with at most `concurrency` in flight; answers results in order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  concurrency: number,
  task: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await task(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));
  return results;
}
