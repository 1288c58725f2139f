/**
 * How long a `kiln` command takes, start to exit, as a user at a shell waits for it: `kiln --help`
 * (nothing but the CLI itself), `kiln ctx list` against a running gateway (a client command: one
 * request), and `kiln keys list` (an admin command: the configuration and the store). Each command
 * runs one at a time, after warm-up runs, with the gateway idle. With BENCH_CLI_BEFORE=<another
 * checkout, built> the same commands run from that checkout too, alternating with this one's, so
 * that a change to the start is measured before and after in one run.
 *
 * Run with `npm run bench:cli`; writes the `cli` section of docs/benchmarks.md. Environment:
 * BENCH_CLI_RUNS (40 per command and checkout), BENCH_CLI_BEFORE, BENCH_CLI_WRITE=0 (print only).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  machine,
  publishSection,
  root,
  runBench,
  scratchDir,
  startKiln,
  startUpstream,
  summarise,
} from './lib.js';

const RUNS = Number(process.env.BENCH_CLI_RUNS ?? 40);
const BEFORE = process.env.BENCH_CLI_BEFORE;
const WRITE = process.env.BENCH_CLI_WRITE !== '0';

const COMMANDS = [['--help'], ['ctx', 'list'], ['keys', 'list']];

/** Milliseconds from spawning `checkout`'s `kiln <args>` to its exit, which must be 0. */
function timed(checkout: string, args: string[], env: NodeJS.ProcessEnv): number {
  const started = performance.now();
  const result = spawnSync(process.execPath, [path.join(checkout, 'bin', 'kiln.js'), ...args], {
    env,
    encoding: 'utf8',
  });
  const ms = performance.now() - started;
  if (result.status !== 0)
    throw new Error(`kiln ${args.join(' ')} exited ${result.status}: ${result.stderr}`);
  return ms;
}

await runBench(async () => {
  const dir = scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-bench-cli-')));
  const upstream = await startUpstream();
  const kiln = await startKiln('kiln', {
    dir,
    upstreamUrl: upstream.url,
    model: 'bench-model',
    workers: 1,
    maxConcurrency: 4,
    logLevel: 'warn',
  });
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    KILN_BASE_URL: kiln.url,
    KILN_API_KEY: kiln.key,
    KILN_CONFIG: path.join(dir, 'kiln.yaml'),
  };
  const checkouts = BEFORE ? [BEFORE, root] : [root];
  const rows: string[] = [];
  for (const args of COMMANDS) {
    const samples = new Map<string, number[]>(checkouts.map((c) => [c, []]));
    for (const checkout of checkouts) for (let i = 0; i < 3; i++) timed(checkout, args, env);
    for (let i = 0; i < RUNS; i++) {
      for (const checkout of checkouts) samples.get(checkout)?.push(timed(checkout, args, env));
    }
    for (const checkout of checkouts) {
      const s = summarise(samples.get(checkout) ?? []);
      const which = checkout === root ? 'this checkout' : 'before';
      rows.push(`| \`kiln ${args.join(' ')}\` | ${which} | ${s.median.toFixed(0)} | ${s.p99.toFixed(0)} |`);
      console.log(rows.at(-1));
    }
  }
  await kiln.stop();
  await upstream.child.stop();

  const body = `## CLI start: how long a command takes

${new Date().toISOString().slice(0, 10)} · ${machine()} · \`npm run bench:cli\`, ${RUNS} runs a row

Wall-clock time from spawning \`node bin/kiln.js …\` to its exit, one at a time after three warm-up
runs, with a local gateway (SQLite) idle: \`--help\` is the CLI alone, \`ctx list\` a client
command (one request to the gateway), \`keys list\` an admin command (reads the configuration and
opens the store).${BEFORE ? ' "before" is another checkout, run alternately with this one.' : ''}

| command | checkout | median ms | p99 ms |
|---|---|---|---|
${rows.join('\n')}`;
  publishSection('cli', body, WRITE);
});
