/**
 * The relays bench/streams.ts, bench/streams/probe.ts and bench/ab.ts send streams to, as the
 * client sees them: the bare Node relay, and a Kiln already started.
 */
import { freePort, type Kiln, ready, startChild } from '../lib.js';
import type { StreamTarget } from './client.js';

const JSON_BODY = { 'content-type': 'application/json' } as const;

/** A relay as the client sees it, and how to stop it. */
export interface Running {
  target: StreamTarget;
  stop(): Promise<void>;
}

/**
 * bench/streams/bare-relay.ts (or `script`, another relay taking the same flags) on a free port in
 * front of `upstreamUrl`, once it answers.
 */
export async function startBareRelay(
  name: string,
  upstreamUrl: string,
  nodeArgs: readonly string[] = [],
  script = 'bench/streams/bare-relay.ts',
): Promise<Running> {
  const port = await freePort();
  const child = startChild(
    name,
    [...nodeArgs, '--import', 'tsx', script, `--port=${port}`, `--upstream=${upstreamUrl}`],
    {},
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
