import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { handleChat, type NonStreamDisconnect } from './chat.js';
import { LlmEngine, type SimStats } from './engine.js';
import { type Fault, parseFault } from './faults.js';
import { FLAVORS, type Flavor, type FlavorName, type ReplicaInfo, type RouteAnswer } from './flavor.js';
import { readJson, sendError, sendJson } from './http.js';
import { llamacpp } from './llamacpp.js';
import { isSimError } from './protocol.js';
import { vllm } from './vllm.js';

export type { NonStreamDisconnect } from './chat.js';
export type { SimStats } from './engine.js';
export type { Fault } from './faults.js';
export type { FlavorName } from './flavor.js';

const FLAVOR_OF: Record<FlavorName, Flavor> = { vllm, 'llama.cpp': llamacpp };

/**
 * An OpenAI-compatible LLM server that behaves like vLLM or llama.cpp's llama-server without a
 * GPU: deterministic text, continuous batching, a KV prefix cache and real prefill/decode timing,
 * plus faults to rehearse failure against. Built on node:http rather than Fastify: the few routes
 * need no router, and server-sent events, destroying a socket mid-stream and closing and reopening
 * the listener are direct there.
 */
export interface LlmSimOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 (the default) = any free port. */
  port?: number;
  /** The served model id; default 'sim-llama-3-8b'. */
  model?: string;
  /**
   * Requests running at once (continuous batching); more wait in a FIFO queue. Running requests
   * prefill one at a time (the engine's shared compute) and decode side by side. Default 8.
   */
  maxSequences?: number;
  /** Prefix-cache capacity in KV blocks, LRU eviction; 0 disables it. Default 1024. */
  kvBlocks?: number;
  /** Tokens per KV block. Default 16. */
  blockTokens?: number;
  /** Prefill time per prompt token not found in the prefix cache; one prefill at a time. Default 0.05 ms. */
  prefillMsPerToken?: number;
  /** Decode time per output token. Default 5 ms. */
  decodeMsPerToken?: number;
  /** Output tokens when the request gives neither max_tokens nor max_completion_tokens. Default 64. */
  maxTokensDefault?: number;
  /** Prompt plus output tokens (llama.cpp: the context of one slot); longer prompts get a 400. Default 32768. */
  contextWindow?: number;
  /** The engine imitated on the wire: shapes, errors, routes and metrics. Default 'vllm'. */
  flavor?: FlavorName;
  /**
   * What a non-streaming request does when its client goes away: 'ignore' (the default) runs it
   * to the end, as llama.cpp does (recorded) and as any engine Kiln must not trust to notice;
   * 'cancel' stops it at once, as vLLM's server does. A stream always stops at once.
   */
  nonStreamDisconnect?: NonStreamDisconnect;
  /**
   * How long the engine loads its model after starting: llama.cpp answers every route 503
   * `Loading model` meanwhile, vLLM accepts no connection yet. Default 0.
   */
  loadMs?: number;
  /**
   * Streams carry no usage chunk, whatever `stream_options` asks, as an OpenAI-compatible server
   * that does not implement the option sends none: a gateway must count such answers without the
   * engine's usage. Default false.
   */
  ignoreStreamOptions?: boolean;
  /**
   * The model reads images: `image_url` parts are answered (each a media marker in the prompt), as
   * llama-server started with its `--mmproj` projector (/props then says `modalities.vision` true)
   * or vLLM serving a multimodal model does. Without it (the default) each flavor refuses them in
   * its engine's words.
   */
  vision?: boolean;
}

export interface LlmSim {
  /** `http://host:port`, without `/v1`. */
  url: string;
  port: number;
  close(): Promise<void>;
  stats(): SimStats;
  /** Empties the prefix cache, as `POST /reset_prefix_cache` does. */
  resetPrefixCache(): void;
  /**
   * Sets (or with undefined clears) the fault. Callers may ignore the promise; it resolves once
   * the fault is in force — for `refuse`, once the listener is closed or open again.
   */
  setFault(f: Fault | undefined): Promise<void>;
}

type Settings = Required<LlmSimOptions>;

const DEFAULTS: Settings = {
  host: '127.0.0.1',
  port: 0,
  model: 'sim-llama-3-8b',
  maxSequences: 8,
  kvBlocks: 1024,
  blockTokens: 16,
  prefillMsPerToken: 0.05,
  decodeMsPerToken: 5,
  maxTokensDefault: 64,
  contextWindow: 32768,
  flavor: 'vllm',
  nonStreamDisconnect: 'ignore',
  loadMs: 0,
  ignoreStreamOptions: false,
  vision: false,
};

function settingsFrom(options: LlmSimOptions): Settings {
  const settings: Settings = { ...DEFAULTS };
  for (const [name, value] of Object.entries(options) as [keyof Settings, unknown][]) {
    if (value !== undefined) (settings as Record<string, unknown>)[name] = value;
  }
  const rules: [keyof Settings, number, boolean][] = [
    ['port', 0, true],
    ['maxSequences', 1, true],
    ['kvBlocks', 0, true],
    ['blockTokens', 1, true],
    ['maxTokensDefault', 1, true],
    ['contextWindow', 2, true],
    ['prefillMsPerToken', 0, false],
    ['decodeMsPerToken', 0, false],
    ['loadMs', 0, false],
  ];
  if (!FLAVORS.includes(settings.flavor)) {
    throw new RangeError(
      `LLM simulator option flavor must be one of ${FLAVORS.join(', ')}, got ${String(settings.flavor)}`,
    );
  }
  if (!['ignore', 'cancel'].includes(settings.nonStreamDisconnect)) {
    throw new RangeError(
      `LLM simulator option nonStreamDisconnect must be ignore or cancel, got ${String(settings.nonStreamDisconnect)}`,
    );
  }
  for (const [name, min, integer] of rules) {
    const value = settings[name] as unknown;
    if (
      typeof value !== 'number' ||
      !Number.isFinite(value) ||
      value < min ||
      (integer && !Number.isInteger(value))
    ) {
      throw new RangeError(
        `LLM simulator option ${name} must be ${integer ? 'an integer' : 'a number'} ≥ ${min}, got ${String(value)}`,
      );
    }
  }
  if (settings.port > 65535)
    throw new RangeError(`LLM simulator option port must be ≤ 65535, got ${settings.port}`);
  return settings;
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const failed = (error: Error) => reject(error);
    server.once('error', failed);
    server.listen(port, host, () => {
      server.off('error', failed);
      resolve();
    });
  });
}

/** A listener that cannot reopen (its port taken meanwhile) is worth a warning, not a crash. */
const warnListener = (error: unknown) =>
  process.emitWarning(`LLM simulator listener: ${(error as Error).message ?? String(error)}`);

/** A flavor route's answer on the wire. */
function sendAnswer(res: ServerResponse, flavor: Flavor, answer: RouteAnswer) {
  if (isSimError(answer)) return sendError(res, flavor, answer);
  if ('json' in answer) return sendJson(res, flavor, answer.status, answer.json);
  res.writeHead(answer.status, { ...flavor.headers, 'content-type': answer.contentType });
  res.end(answer.text);
}

export async function startLlmSim(options: LlmSimOptions = {}): Promise<LlmSim> {
  const settings = settingsFrom(options);
  const flavor = FLAVOR_OF[settings.flavor];
  const engine = new LlmEngine(settings);
  const replica: ReplicaInfo = {
    ...settings,
    stats: () => engine.stats(),
    slots: () => engine.slotViews(),
    resetPrefixCache: () => engine.resetPrefixCache(),
  };
  let fault: Fault | undefined;
  let faultTimer: NodeJS.Timeout | undefined;
  let loading = settings.loadMs > 0;
  let loadTimer: NodeJS.Timeout | undefined;
  let closed = false;
  // Listener changes (refuse, reopen, close) run one after another, each bringing the listener
  // to the state the current fault asks for.
  let listener = Promise.resolve();

  const route = async (req: IncomingMessage, res: ServerResponse, path: string): Promise<void> => {
    if (path === '/sim/fault') {
      if (req.method === 'GET') return sendJson(res, flavor, 200, { fault: fault ?? null });
      if (req.method !== 'POST') return sendError(res, flavor, flavor.wrongMethod());
      const read = await readJson(req, flavor);
      if ('error' in read) return sendError(res, flavor, read.error);
      const parsed = parseFault(read.body);
      if ('problem' in parsed) return sendError(res, flavor, flavor.error(400, parsed.problem));
      // Answer first, on a connection that then closes, so that a `refuse` leaves no idle
      // keep-alive connection behind for the client to reuse.
      sendJson(res, flavor, 200, { fault: parsed.fault ?? null }, { connection: 'close' });
      await sim.setFault(parsed.fault).catch(warnListener);
      return;
    }
    if (loading) return sendError(res, flavor, flavor.loading());
    if (flavor.chatPaths.includes(path)) {
      if (req.method !== 'POST') return sendError(res, flavor, flavor.wrongMethod());
      return handleChat(req, res, engine, settings, flavor, fault);
    }
    const served = Object.hasOwn(flavor.routes, path) ? flavor.routes[path] : undefined;
    if (!served) return sendError(res, flavor, flavor.unknownRoute());
    if (req.method !== served.method) return sendError(res, flavor, flavor.wrongMethod());
    let body: unknown;
    if (served.readsBody) {
      const read = await readJson(req, flavor);
      if ('error' in read) return sendError(res, flavor, read.error);
      body = read.body;
    }
    return sendAnswer(res, flavor, served.answer(body, replica));
  };

  const server = createServer((req, res) => {
    // While refusing, a request on a connection opened before is cut as if the engine were gone.
    if (fault?.kind === 'refuse') {
      req.socket.destroy();
      return;
    }
    const url = req.url ?? '/';
    const query = url.indexOf('?');
    route(req, res, query < 0 ? url : url.slice(0, query)).catch((error: unknown) => {
      if (res.headersSent) res.destroy();
      else sendError(res, flavor, flavor.error(500, String(error)));
    });
  });
  await listen(server, settings.port, settings.host);
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : settings.port;
  const host = settings.host.includes(':') ? `[${settings.host}]` : settings.host;

  const syncListener = () => {
    listener = listener
      .catch(() => undefined)
      .then(async () => {
        // vLLM opens its port only once the model is loaded; llama.cpp answers 503 meanwhile.
        const refusing = fault?.kind === 'refuse' || closed || (loading && settings.flavor === 'vllm');
        if (refusing && server.listening) {
          // close() stops accepting at once and drops idle connections; its callback would wait
          // for the busy ones, which may finish their answers.
          server.close();
        } else if (!refusing && !server.listening) {
          await listen(server, port, settings.host);
        }
      });
    return listener;
  };

  if (loading) {
    loadTimer = setTimeout(() => {
      loading = false;
      void syncListener().catch(warnListener);
    }, settings.loadMs);
    await syncListener();
  }

  const sim: LlmSim = {
    url: `http://${host}:${port}`,
    port,
    stats: () => engine.stats(),
    resetPrefixCache: () => engine.resetPrefixCache(),
    setFault(f) {
      clearTimeout(faultTimer);
      fault = f;
      if (f?.durationMs !== undefined) {
        faultTimer = setTimeout(() => void sim.setFault(undefined).catch(warnListener), f.durationMs);
      }
      return syncListener();
    },
    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(faultTimer);
      clearTimeout(loadTimer);
      engine.stop();
      await syncListener().catch(() => undefined);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
  return sim;
}

/** N replicas on consecutive ports starting at `port` (or all on port 0 = any when port is 0). */
export async function startLlmFleet(replicas: number, options: LlmSimOptions = {}): Promise<LlmSim[]> {
  if (!Number.isInteger(replicas) || replicas < 1) {
    throw new RangeError(`replicas must be an integer ≥ 1, got ${replicas}`);
  }
  const base = options.port ?? 0;
  const fleet: LlmSim[] = [];
  try {
    for (let i = 0; i < replicas; i++) {
      fleet.push(await startLlmSim({ ...options, port: base === 0 ? 0 : base + i }));
    }
  } catch (error) {
    await Promise.all(fleet.map((sim) => sim.close()));
    throw error;
  }
  return fleet;
}
