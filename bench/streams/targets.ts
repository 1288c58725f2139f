/**
 * The relays bench/streams.ts, bench/streams/probe.ts and bench/ab.ts send streams to, as the
 * client sees them: the bare Node relay, and a Kiln already started.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, type Kiln, ready, scratchDir, startChild, startKiln } from '../lib.js';
import type { StreamTarget } from './client.js';

const JSON_BODY = { 'content-type': 'application/json' } as const;

/** A relay as the client sees it, and how to stop it. */
export interface Running {
  target: StreamTarget;
  stop(): Promise<void>;
}

/**
 * bench/streams/bare-relay.ts (or `script`, another relay taking the same flags) on a free port in
 * front of `upstreamUrl`, once it answers; `wrapper` runs it under another program (valgrind).
 */
export async function startBareRelay(
  name: string,
  upstreamUrl: string,
  nodeArgs: readonly string[] = [],
  script = 'bench/streams/bare-relay.ts',
  wrapper?: string[],
): Promise<Running> {
  const port = await freePort();
  const child = startChild(
    name,
    [...nodeArgs, '--import', 'tsx', script, `--port=${port}`, `--upstream=${upstreamUrl}`],
    {},
    undefined,
    wrapper,
  );
  const origin = `http://127.0.0.1:${port}`;
  await ready(child, `${origin}/health`);
  return {
    target: { name, origin, headers: { ...JSON_BODY }, probePath: '/health', pid: child.process.pid },
    stop: () => child.stop(),
  };
}

/** A started Kiln as a target, called with its admin key; its CPU is its own process's. */
export function kilnTarget(name: string, kiln: Kiln): StreamTarget {
  return {
    name,
    origin: kiln.url,
    headers: { ...JSON_BODY, authorization: `Bearer ${kiln.key}` },
    probePath: '/healthz',
    pid: kiln.child.process.pid,
  };
}

/**
 * The relay a diagnostic names (bench/streams/probe.ts, bench/streams/instructions.ts) in front of
 * `upstreamUrl`: `bare`, `fastify` (the bare relay behind Fastify), or Kiln on `sqlite` or `postgres`
 * serving `model`, with room for hundreds of streams at once.
 */
export async function startRelay(
  kind: string,
  upstreamUrl: string,
  model: string,
  options: { nodeArgs?: string[]; wrapper?: string[] } = {},
): Promise<Running> {
  const { nodeArgs = [], wrapper } = options;
  if (kind === 'bare' || kind === 'fastify') {
    const script = kind === 'bare' ? 'bench/streams/bare-relay.ts' : 'bench/streams/fastify-relay.ts';
    return startBareRelay(kind, upstreamUrl, nodeArgs, script, wrapper);
  }
  if (kind !== 'sqlite' && kind !== 'postgres')
    throw new Error(`relay ${kind}: bare, fastify, sqlite or postgres`);
  const kiln = await startKiln(`kiln serve (${kind})`, {
    dir: scratchDir(mkdtempSync(path.join(tmpdir(), 'kiln-relay-'))),
    upstreamUrl,
    model,
    workers: 1024,
    maxConcurrency: 4096,
    postgresUrl: kind === 'postgres' ? 'postgres://postgres@127.0.0.1:5432/test' : undefined,
    nodeArgs,
    ...(wrapper ? { wrapper } : {}),
    logLevel: 'warn',
  });
  return { target: kilnTarget(kind, kiln), stop: () => kiln.stop() };
}
