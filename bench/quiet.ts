/**
 * A diagnostic for what a quiet spell costs, writing nothing to docs: Kiln on SQLite, started as the
 * `kiln` command starts it (bench/lib.ts), warmed with sync requests, left without traffic, then
 * measured in windows of 1,000 requests at 32 in flight: CPU per request in each, from /proc. The
 * table in docs/operations.md ("After a quiet spell") comes from it.
 *
 * Run as `npx tsx bench/quiet.ts` after `npm run build`. Environment: QUIET_MS (50000 ms without
 * traffic), QUIET_WARMUP (20000 requests), QUIET_NODE_ARGS (more node options for Kiln, e.g.
 * `--trace-gc --trace-deopt`), QUIET_TRACE (a file for Kiln's stdout, where those options write).
 * Without the bin's `--no-memory-reducer`, run `bin/kiln.js` through a checkout whose shebang lacks
 * it, or compare with `QUIET_NODE_ARGS=--memory-reducer` (the later option wins).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { cpuMs, load, runBench, scratchDir, startKiln, startUpstream } from './lib.js';

const env = process.env;
const QUIET_MS = Number(env.QUIET_MS ?? 50_000);
const WARMUP = Number(env.QUIET_WARMUP ?? 20_000);
const NODE_ARGS = (env.QUIET_NODE_ARGS ?? '').split(' ').filter(Boolean);
const WINDOW = 1000;
const MODEL = 'bench-model';

async function main(): Promise<void> {
  const upstream = await startUpstream();
  const kiln = await startKiln('kiln serve (sqlite)', {
    dir: scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-quiet-'))),
    upstreamUrl: upstream.url,
    model: MODEL,
    workers: 64,
    maxConcurrency: 64,
    nodeArgs: NODE_ARGS,
    logLevel: 'warn',
    ...(env.QUIET_TRACE ? { wrapper: ['sh', '-c', `exec "$0" "$@" > "${env.QUIET_TRACE}"`] } : {}),
  });
  const pid = kiln.child.process.pid as number;
  const pool = new Pool(kiln.url, { connections: 32 });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${kiln.key}` };
  let n = 0;
  const request = async () => {
    const response = await pool.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers,
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: `q${n++}: hi` }],
        max_tokens: 16,
      }),
    });
    const text = await response.body.text();
    if (response.statusCode !== 200) throw new Error(`status ${response.statusCode}: ${text.slice(0, 200)}`);
  };
  const measure = async (label: string, count: number) => {
    const before = cpuMs(pid) as number;
    await load(count, 32, request);
    console.log(`${label}: ${(((cpuMs(pid) as number) - before) / count).toFixed(3)} ms of CPU a request`);
  };
  try {
    await measure(`warm-up (${WARMUP})`, WARMUP);
    for (let i = 1; i <= 3; i++) await measure(`before the quiet, window ${i}`, WINDOW);
    console.log(`${QUIET_MS / 1000} s without traffic`);
    await new Promise((resolve) => setTimeout(resolve, QUIET_MS));
    for (let i = 1; i <= 6; i++) await measure(`after it, window ${i}`, WINDOW);
  } finally {
    await pool.close();
    await kiln.stop();
    await upstream.child.stop();
  }
}

await runBench(main);
