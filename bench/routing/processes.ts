/**
 * The routing benchmark's child processes: the simulated replicas (`kiln sim llm`) and the gateways
 * (`kiln serve`), each in a process of its own, all killed when this one ends, however it ends.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type Child, freePort, ready, root, startChild } from '../lib.js';

const kilnBin = path.join(root, 'bin', 'kiln.js');

const exited = (child: Child) => child.process.exitCode !== null || child.process.signalCode !== null;

export interface SimSettings {
  replicas: number;
  model: string;
  kvBlocks: number;
  blockTokens: number;
  prefillMsPerToken: number;
  decodeMsPerToken: number;
  maxSequences: number;
  contextWindow: number;
}

/** `kiln sim llm` with fresh (empty) caches; resolves with the replicas' URLs once each answers /health. */
export async function startSim(s: SimSettings): Promise<{ child: Child; urls: string[] }> {
  let stdout = '';
  const args = [
    kilnBin,
    'sim',
    'llm',
    '--port=0',
    `--replicas=${s.replicas}`,
    `--model=${s.model}`,
    `--kv-blocks=${s.kvBlocks}`,
    `--block-tokens=${s.blockTokens}`,
    `--prefill-ms-per-token=${s.prefillMsPerToken}`,
    `--decode-ms-per-token=${s.decodeMsPerToken}`,
    `--max-sequences=${s.maxSequences}`,
    `--context-window=${s.contextWindow}`,
  ];
  const child = startChild('kiln sim llm', args, {}, (text) => {
    stdout += text;
  });
  const deadline = Date.now() + 30_000;
  let urls: string[] = [];
  while (urls.length < s.replicas) {
    if (exited(child)) throw new Error(`kiln sim llm exited before it was ready:\n${child.output()}`);
    if (Date.now() > deadline) throw new Error(`kiln sim llm printed no URLs after 30 s:\n${child.output()}`);
    urls = stdout.split('\n').filter((line) => line.startsWith('http://'));
    if (urls.length < s.replicas) await sleep(50);
  }
  for (const url of urls) await ready(child, `${url}/health`);
  return { child, urls };
}

export interface GatewaySettings {
  storeUrl: string;
  schema: string;
  workers: number;
  poolSize: number;
  model: string;
  upstreamModel: string;
  replicaUrls: string[];
  maxConcurrency: number;
  policy: string;
  /** `routing.balance_abs_threshold` of the pool; Kiln's default when undefined. */
  balanceAbsThreshold?: number | undefined;
  /** Extra node options for the gateway process (e.g. --cpu-prof). */
  nodeArgs?: string[];
}

/** One `kiln serve` on the PostgreSQL store, its own data dir and port; resolves once /readyz answers. */
export async function startGateway(
  name: string,
  dir: string,
  s: GatewaySettings,
): Promise<{ child: Child; url: string; dataDir: string }> {
  const port = await freePort();
  const dataDir = path.join(dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const configFile = path.join(dir, 'kiln.yaml');
  writeFileSync(
    configFile,
    `host: 127.0.0.1
port: ${port}
data_dir: ${JSON.stringify(dataDir)}
store:
  url: ${JSON.stringify(s.storeUrl)}
  schema: ${s.schema}
  pool_size: ${s.poolSize}
jobs:
  workers: ${s.workers}
log:
  level: warn
engines:
  pool:
    serves: shared-prefix
    replicas: ${JSON.stringify(s.replicaUrls)}
    models: { ${s.model}: ${s.upstreamModel} }
    max_concurrency: ${s.maxConcurrency}
    routing: { policy: ${s.policy}${s.balanceAbsThreshold === undefined ? '' : `, balance_abs_threshold: ${s.balanceAbsThreshold}`} }
routing:
  long_context_tokens: 100000
`,
  );
  const child = startChild(name, [...(s.nodeArgs ?? []), kilnBin, 'serve'], { KILN_CONFIG: configFile });
  const url = `http://127.0.0.1:${port}`;
  await ready(child, `${url}/readyz`);
  return { child, url, dataDir };
}

export const readAdminKey = (dataDir: string) => readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim();

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
