import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { Logger } from 'pino';
import type { LlmSimOptions } from '../sim/llm/server.js';
import { UsageError } from './common.js';
import { gatewayConfig, portNumber, serve, startGateway, withPortOption } from './serve.js';

/** The simulated model's name on the engines, and the name callers use. */
const UPSTREAM_MODEL = 'sim-llama-3-8b';
const MODEL = 'llama-3-8b';

const SUPPORT_PREAMBLE = `You are the support assistant of Kiln, a self-hosted generation gateway.
Answer briefly and precisely. Kiln routes chat requests to engine pools by request class:
shared-prefix work goes to a pool whose prefix cache already holds the shared preamble, unique
prompts to a pool tuned for throughput, and long prompts to the engine that pages its KV cache best.
When unsure, say so, and point to the documentation in docs/.`;

/** Something `kiln dev` started and must stop again: a simulator or the gateway. */
interface Closable {
  close(): Promise<void>;
}

/** Stops `started`, the last started first. */
async function closeAll(started: Closable[]): Promise<void> {
  for (const part of [...started].reverse()) await part.close();
}

/**
 * `kiln dev`: the gateway on SQLite plus a simulated fleet — a shared-prefix pool, a unique pool and
 * a long-context engine — with a config to match, so every chat mode can be tried in a minute.
 * A start that fails (a busy port, most often) stops the simulators it had started before it throws.
 */
async function startDev(command: Command, options: { simPort: number }): Promise<void> {
  const started: Closable[] = [];
  try {
    await runDev(command, options, started);
  } catch (error) {
    await closeAll(started);
    throw error;
  }
}

async function runDev(command: Command, options: { simPort: number }, started: Closable[]): Promise<void> {
  // The user's configuration first: a mistake in it is reported before any simulator starts.
  const { configFile, data_dir: dataDir } = await gatewayConfig(command);
  const { startLlmFleet } = await import('../sim/llm/server.js');
  const host = '127.0.0.1';
  const base = options.simPort;
  const simFleet = async (replicas: number, offset: number, extra: Partial<LlmSimOptions> = {}) => {
    const port = base === 0 ? 0 : base + offset;
    try {
      const fleet = await startLlmFleet(replicas, { host, port, model: UPSTREAM_MODEL, ...extra });
      started.push(...fleet);
      return fleet;
    } catch (error) {
      throw simBindError(error, host, port, replicas);
    }
  };
  const prefixPool = await simFleet(2, 0);
  const uniquePool = await simFleet(2, 2);
  const longContext = await simFleet(1, 4, { contextWindow: 131_072, kvBlocks: 16_384 });
  const sims = [...prefixPool, ...uniquePool, ...longContext];
  // A ComfyUI-protocol runner with every model's workflow, rendering real (simulated) video.
  const { startComfySim } = await import('../sim/comfyui/server.js');
  const comfyPort = base === 0 ? 0 : base + 5;
  const comfy = await startComfySim({ host, port: comfyPort }).catch((error: unknown) => {
    throw simBindError(error, host, comfyPort, 1);
  });
  started.push(comfy);
  const engine = (serves: string, replicas: { url: string }[], extra: Record<string, unknown> = {}) => ({
    serves,
    replicas: replicas.map((r) => r.url),
    models: { [MODEL]: UPSTREAM_MODEL },
    owned_by: 'simulator',
    // The simulators are vLLM, which keeps each organisation's prompts apart in its cache by salt.
    cache_salt: true,
    ...extra,
  });
  // The fleet goes into a config file of its own (the user's kiln.yaml, if any, plus the fleet), so
  // a reload — SIGHUP or POST /admin/reload — re-reads it: edit it to rehearse routing changes.
  const { parse: parseYaml, stringify: stringifyYaml } = await import('yaml');
  const own = configFile ? (parseYaml(readFileSync(configFile, 'utf8')) ?? {}) : {};
  const fleet = {
    engines: {
      'prefix-pool': engine('shared-prefix', prefixPool),
      'unique-pool': engine('unique', uniquePool),
      'long-context': engine('long-context', longContext, { max_concurrency: 4 }),
    },
    personas: {
      assistant: { model: MODEL, system: 'You are a helpful assistant.' },
      support: { model: MODEL, system: SUPPORT_PREAMBLE, shared_preamble: true },
    },
    runners: {
      'comfy-sim': {
        url: comfy.url,
        models: ['wan-2.2', 'ltx-video', 'ltx-2.3', 'sdxl'],
        max_concurrency: 2,
      },
    },
  };
  mkdirSync(dataDir, { recursive: true });
  const devFile = path.join(dataDir, 'kiln.dev.yaml');
  writeFileSync(devFile, stringifyYaml({ ...own, ...fleet }));
  const config = await gatewayConfig(command, devFile);
  const { createLogger } = await import('../server.js');
  const logger: Logger = createLogger(config);
  const server = await startGateway(config, logger, configFile);
  started.push(server);
  const keyFile = path.join(config.data_dir, 'admin.key');
  process.stdout.write(
    [
      '',
      `Kiln dev is running at ${server.url}/v1 with a simulated fleet:`,
      ...sims.map(
        (s, i) => `  ${i < 2 ? 'prefix-pool ' : i < 4 ? 'unique-pool ' : 'long-context'}  ${s.url}`,
      ),
      `  comfyui       ${comfy.url}  (wan-2.2, ltx-video, ltx-2.3, sdxl)`,
      `Admin key: ${keyFile}`,
      `Fleet config: ${devFile} (edit, then kill -HUP ${process.pid} or POST /admin/reload)`,
      '',
      'Try it:',
      `  export KILN_BASE_URL=${server.url} KILN_API_KEY=$(cat ${path.relative(process.cwd(), keyFile) || keyFile})`,
      '  npx kiln chat --persona support "How does routing work?"',
      `  curl -s ${server.url}/v1/models -H "Authorization: Bearer $KILN_API_KEY"`,
      '',
    ].join('\n'),
  );
  process.on('SIGHUP', () => {
    server.runtime.reload().catch((error: unknown) => {
      logger.error({ err: error }, 'reload failed; the running configuration stays in force');
    });
  });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await closeAll(started);
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
}

/** A simulator port that is taken: say which, and that `--sim-port` picks others. */
function simBindError(error: unknown, host: string, port: number, count: number): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== 'EADDRINUSE' && code !== 'EACCES') return error;
  const ports = count === 1 ? `${port}` : `${port}–${port + count - 1}`;
  return new UsageError(
    `cannot start the simulated fleet on ${host}:${ports}: ${code === 'EACCES' ? 'permission denied' : 'a port is already in use'}; choose other ports with --sim-port <n> (the fleet takes n to n+5), or --sim-port 0 for any free ports`,
  );
}

export function devCommands(program: Command): void {
  const dev = program
    .command('dev')
    .description('run the gateway on SQLite with a simulated engine fleet and a config to match')
    .option('--sim-port <port>', 'first port of the simulated replicas (0 = any free ports)', portNumber, 0);
  withPortOption(dev).action(async (options: { simPort: number }, command: Command) => {
    await startDev(command, { simPort: options.simPort });
  });

  withPortOption(
    program
      .command('start')
      .description(
        'kiln serve when a configuration file exists (--config, KILN_CONFIG, ./kiln.yaml), else kiln dev',
      ),
  ).action(async (_options, command: Command) => {
    const { config } = command.optsWithGlobals<{ config?: string }>();
    const configured =
      config ?? process.env.KILN_CONFIG ?? (existsSync('kiln.yaml') ? 'kiln.yaml' : undefined);
    if (configured) await serve(command);
    else await startDev(command, { simPort: 0 });
  });
}
