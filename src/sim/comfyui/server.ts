import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { type WebSocket, WebSocketServer } from 'ws';
import { loadTemplates, MODEL_FILE_INPUTS, modelFiles } from '../../engines/comfyui/workflows.js';
import { NODE_CLASSES } from './catalogue.js';
import type { Send } from './execute.js';
import { SimFiles } from './files.js';
import { BodyTooLarge, sendStatus, stripUndefined } from './http.js';
import type { ModelFolder } from './nodes.js';
import { PromptQueue } from './queue.js';
import { createRoutes } from './routes.js';

export { FAIL_MARKER } from './execute.js';

/**
 * A ComfyUI server without a GPU, imitating ComfyUI 0.3.64 as recorded in
 * ../shared/reference/recordings/comfyui (`server.py`, `execution.py`): uploads, `POST /prompt`
 * validation with ComfyUI's error shapes, a FIFO queue running one prompt at a time, the `/ws`
 * messages of a run (`progress_state` included), history, `GET /view`, `/interrupt` (a pending
 * prompt is ignored) and `POST /queue {delete}`. 0.3.64 has no `/api/jobs`; `jobsApi` adds newer
 * builds' job routes. Outputs are real files: WebM clips rendered with ffmpeg at the graph's size,
 * frame count and rate (a cross-fade from the start to the end image under a slow pan), and PNGs
 * drawn from the prompt and seed. A prompt whose text contains `[sim:fail]` fails in its sampler
 * with an `execution_error` — the simulator's fault hook. Every route is also served under `/api`.
 */
export interface ComfySimOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 (the default) = any free port. */
  port?: number;
  /** Kiln model names whose template model files are installed; default every template, `[]` none. */
  models?: string[];
  /** Simulated time per sampler step; default 20 ms. A slow node (ImageBlur) takes `steps` of them. */
  stepMs?: number;
  /** Progress steps per sampler node (one per prompt, two for Wan's two passes); default 10. */
  steps?: number;
  /** Also serve newer ComfyUI's `GET /api/jobs/{id}` and `POST /api/jobs/{id}/cancel`; default false (0.3.64). */
  jobsApi?: boolean;
}

export interface ComfySim {
  /** `http://host:port`. */
  url: string;
  port: number;
  /** Where the runner saves its outputs (`type=output`), for tests to look at. */
  outputDir: string;
  close(): Promise<void>;
  stats(): { prompts: number; running: number; queued: number; interrupted: number };
}

/** The model files of the chosen templates, by folder, sorted as ComfyUI lists them. */
export function installedModelFiles(models?: string[]): Map<ModelFolder, string[]> {
  const templates = loadTemplates();
  const names = models ?? [...templates.keys()];
  const installed = new Map<ModelFolder, Set<string>>();
  for (const name of names) {
    const template = templates.get(name);
    if (!template) {
      throw new RangeError(`unknown model ${name}; the templates are ${[...templates.keys()].join(', ')}`);
    }
    const placed = new Set<string>();
    for (const graph of Object.values(template.graphs)) {
      for (const node of Object.values(graph)) {
        const inputName = MODEL_FILE_INPUTS[node.class_type];
        const input = inputName ? NODE_CLASSES[node.class_type]?.required[inputName] : undefined;
        const file = inputName ? node.inputs[inputName] : undefined;
        if (input?.kind !== 'files' || typeof file !== 'string') continue;
        if (!installed.has(input.folder)) installed.set(input.folder, new Set());
        installed.get(input.folder)?.add(file);
        placed.add(file);
      }
    }
    const unplaced = modelFiles(template).filter((file) => !placed.has(file));
    if (unplaced.length > 0) throw new Error(`no model folder known for ${unplaced.join(', ')} (${name})`);
  }
  return new Map([...installed].map(([folder, files]) => [folder, [...files].sort()]));
}

function checkOptions(options: ComfySimOptions) {
  const { jobsApi, models, ...numbers } = options;
  const settings = { host: '127.0.0.1', port: 0, stepMs: 20, steps: 10, ...stripUndefined(numbers) };
  const rules: [Exclude<keyof typeof settings, 'host'>, number, number, boolean][] = [
    ['port', 0, 65535, true],
    ['stepMs', 0, Number.MAX_SAFE_INTEGER, false],
    ['steps', 1, 100000, true],
  ];
  for (const [name, min, max, integer] of rules) {
    const value = settings[name];
    if (
      typeof value !== 'number' ||
      !(value >= min && value <= max) ||
      (integer && !Number.isInteger(value))
    ) {
      throw new RangeError(
        `ComfyUI simulator option ${name} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}, got ${String(value)}`,
      );
    }
  }
  return { ...settings, models, jobsApi: jobsApi === true };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export async function startComfySim(options: ComfySimOptions = {}): Promise<ComfySim> {
  const settings = checkOptions(options);
  const installed = installedModelFiles(settings.models);
  const files = await SimFiles.create();

  const sockets = new Map<string, WebSocket>();
  // ComfyUI queues its messages and a loop task sends them: an HTTP answer given in the same turn
  // (POST /prompt, POST /queue) leaves before the `status` it caused. Order is kept.
  const outbox: [text: string, sid: string | undefined][] = [];
  const flush = () => {
    for (const [text, sid] of outbox.splice(0)) {
      const targets = sid === undefined ? [...sockets.values()] : [sockets.get(sid)];
      for (const socket of targets) if (socket?.readyState === 1) socket.send(text);
    }
  };
  const send: Send = (event, data, sid) => {
    if (outbox.push([JSON.stringify({ type: event, data }), sid]) === 1) setImmediate(flush);
  };
  const queue = new PromptQueue(files, send, { stepMs: settings.stepMs, steps: settings.steps });
  const route = createRoutes({ files, queue, installed, jobsApi: settings.jobsApi });

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://sim');
    route(req, res, url).catch((error: unknown) => {
      if (res.headersSent) res.destroy();
      else if (error instanceof BodyTooLarge) sendStatus(res, 413);
      else sendStatus(res, 500);
    });
  });

  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://sim');
    if (url.pathname !== '/ws' && url.pathname !== '/api/ws') {
      socket.destroy();
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const sid = url.searchParams.get('clientId') || randomUUID().replaceAll('-', '');
      sockets.set(sid, ws);
      ws.send(JSON.stringify({ type: 'status', data: { status: queue.info(), sid } }));
      // A client reconnecting while its prompt runs is told the node it is on.
      if (queue.runningClient === sid && queue.lastNode !== null) {
        ws.send(JSON.stringify({ type: 'executing', data: { node: queue.lastNode } }));
      }
      let first = true;
      ws.on('message', (raw, binary) => {
        if (!first || binary) return;
        first = false;
        try {
          const message = JSON.parse(raw.toString()) as { type?: string };
          if (message.type === 'feature_flags') {
            ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: false } }));
          }
        } catch {
          // ComfyUI logs and ignores a message that is not JSON.
        }
      });
      ws.on('close', () => {
        if (sockets.get(sid) === ws) sockets.delete(sid);
      });
    });
  });

  try {
    await listen(server, settings.port, settings.host);
  } catch (error) {
    await files.close();
    throw error;
  }
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : settings.port;
  const host = settings.host.includes(':') ? `[${settings.host}]` : settings.host;
  let closing: Promise<void> | undefined;

  return {
    url: `http://${host}:${port}`,
    port,
    outputDir: files.dir('output'),
    stats: () => queue.stats(),
    close() {
      closing ??= (async () => {
        await queue.close();
        for (const socket of wss.clients) socket.terminate();
        wss.close();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        await files.close();
      })();
      return closing;
    },
  };
}
