import { randomUUID } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { freemem, totalmem } from 'node:os';
import { NODE_CLASSES } from './catalogue.js';
import type { SimFiles } from './files.js';
import { BodyTooLarge, isObject, readForm, readJson, sendJson, sendStatus, stripUndefined } from './http.js';
import { jobView } from './jobs.js';
import { type Input, MODEL_FOLDERS, type ModelFolder, nodeInfo } from './nodes.js';
import type { PromptQueue } from './queue.js';
import { validatePrompt } from './validate.js';

/**
 * ComfyUI 0.3.64's HTTP routes over the simulator's files and queue; every one also under `/api`.
 * With `jobsApi`, also the job routes newer builds add under `/api/jobs`.
 */

/** The ComfyUI release whose behaviour the simulator imitates (recorded in ../shared/reference). */
export const COMFYUI_VERSION = '0.3.64';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface Route {
  method: 'GET' | 'POST';
  /** Matched against the path without its `/api` prefix. */
  path: RegExp;
  apiOnly?: boolean;
  handle(req: IncomingMessage, res: ServerResponse, url: URL, match: RegExpExecArray): Promise<void> | void;
}

export function createRoutes(deps: {
  files: SimFiles;
  queue: PromptQueue;
  installed: Map<ModelFolder, string[]>;
  /** Serve newer ComfyUI's `/api/jobs/{id}` and `/api/jobs/{id}/cancel` (0.3.64 has neither). */
  jobsApi: boolean;
}): (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void> {
  const { files, queue, installed } = deps;
  /** The next prompt's queue position (ComfyUI's `PromptServer.number`). */
  let number = 0;

  const choices = (input: Input) =>
    input.kind === 'combo'
      ? input.options
      : input.kind === 'files'
        ? [...(installed.get(input.folder) ?? []), ...(input.also ?? [])]
        : input.kind === 'input-image'
          ? files.inputImages()
          : undefined;

  const submit = async (req: IncomingMessage, res: ServerResponse) => {
    const read = await readJson(req);
    if (!read || !isObject(read.value)) return sendStatus(res, 500);
    const body = read.value;
    let position: number;
    if ('number' in body) position = Number(body.number);
    else {
      position = body.front ? -number : number;
      number++;
    }
    if (!('prompt' in body)) {
      const error = {
        type: 'no_prompt',
        message: 'No prompt provided',
        details: 'No prompt provided',
        extra_info: {},
      };
      return sendJson(res, 400, { error, node_errors: {} });
    }
    let promptId: string = randomUUID();
    if (body.prompt_id !== undefined && body.prompt_id !== null) {
      if (typeof body.prompt_id !== 'string' || !UUID.test(body.prompt_id)) {
        const error = {
          type: 'invalid_prompt_id',
          message: 'prompt_id must be a valid UUID',
          details:
            'prompt_id must be a UUID string in canonical lowercase hyphenated form; omit it to let the server generate one',
          extra_info: {},
        };
        return sendJson(res, 400, { error, node_errors: {} });
      }
      promptId = body.prompt_id;
    }
    if (!isObject(body.prompt)) return sendStatus(res, 500);
    const validation = validatePrompt(body.prompt, {
      choices,
      imageExists: (name) => files.imagePath(name) !== undefined,
    });
    const extraData: Record<string, unknown> = isObject(body.extra_data) ? { ...body.extra_data } : {};
    if ('client_id' in body) extraData.client_id = body.client_id;
    if (!validation.ok)
      return sendJson(res, 400, { error: validation.error, node_errors: validation.nodeErrors });
    // Newer builds stamp the submission for their jobs API; 0.3.64 keeps extra_data as sent.
    if (deps.jobsApi) extraData.create_time = Date.now();
    queue.put({
      number: position,
      promptId,
      prompt: validation.prompt,
      extraData,
      outputs: validation.outputs,
    });
    return sendJson(res, 200, { prompt_id: promptId, number: position, node_errors: validation.nodeErrors });
  };

  const upload = async (req: IncomingMessage, res: ServerResponse) => {
    let form: FormData;
    try {
      form = await readForm(req);
    } catch (error) {
      if (error instanceof BodyTooLarge) return sendStatus(res, 413);
      return sendStatus(res, 400);
    }
    const field = (name: string) => {
      const value = form.get(name);
      return typeof value === 'string' ? value : undefined;
    };
    const image = form.get('image');
    const answer = await files.upload({
      ...(image instanceof File ? { image } : {}),
      ...stripUndefined({
        type: field('type'),
        subfolder: field('subfolder'),
        overwrite: field('overwrite'),
      }),
    });
    if (answer.status !== 200) return sendStatus(res, answer.status);
    return sendJson(res, 200, answer.body);
  };

  /**
   * `GET /view`: the file as aiohttp's FileResponse serves it — its length, `Accept-Ranges`, an
   * `ETag` of its modification time (ns) and size in hex, `Last-Modified`, and one byte range as 206
   * (416 past its end), as the recording shows.
   */
  const view = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) => {
    const found = files.view(query);
    if (found.status !== 200) return sendStatus(res, found.status);
    const { size, mtime, mtimeNs } = statSync(found.path, { bigint: true });
    const length = Number(size);
    const headers = {
      'accept-ranges': 'bytes',
      'content-disposition': `filename="${found.filename.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`,
      'content-type': found.contentType,
      etag: `"${mtimeNs.toString(16)}-${size.toString(16)}"`,
      'last-modified': mtime.toUTCString(),
    };
    const range = /^bytes=(\d*)-(\d*)$/.exec(String(req.headers.range ?? ''));
    if (!range || (range[1] === '' && range[2] === '')) {
      res.writeHead(200, { ...headers, 'content-length': length });
      createReadStream(found.path).pipe(res);
      return;
    }
    // `a-b`, `a-` (to the end) or `-n` (the last n bytes).
    const start = range[1] === '' ? Math.max(0, length - Number(range[2])) : Number(range[1]);
    const end = range[1] === '' || range[2] === '' ? length - 1 : Math.min(Number(range[2]), length - 1);
    if (start >= length || start > end) {
      res.writeHead(416, { ...headers, 'content-range': `bytes */${length}` }).end();
      return;
    }
    res.writeHead(206, {
      ...headers,
      'content-length': end - start + 1,
      'content-range': `bytes ${start}-${end}/${length}`,
    });
    createReadStream(found.path, { start, end }).pipe(res);
  };

  const objectInfo = (only?: string) =>
    Object.fromEntries(
      Object.entries(NODE_CLASSES)
        .filter(([name]) => only === undefined || name === only)
        .map(([name, node]) => [name, nodeInfo(name, node, choices)]),
    );

  const readQueueOp = async (req: IncomingMessage, res: ServerResponse) => {
    const read = await readJson(req);
    if (!read || !isObject(read.value)) return sendStatus(res, 500);
    if (read.value.clear) queue.clear();
    if (Array.isArray(read.value.delete)) for (const id of read.value.delete) queue.delete(String(id));
    return sendStatus(res, 200);
  };

  const interrupt = async (req: IncomingMessage, res: ServerResponse) => {
    const read = await readJson(req);
    const id = read && isObject(read.value) ? read.value.prompt_id : undefined;
    // A prompt_id that is not running (still pending, or unknown) is ignored, as ComfyUI logs
    // "Prompt … is not currently running, skipping interrupt".
    queue.interrupt(typeof id === 'string' && id !== '' ? id : undefined);
    return sendStatus(res, 200);
  };

  const historyList = (res: ServerResponse, url: URL) => {
    const maxItems = url.searchParams.get('max_items');
    const offset = url.searchParams.get('offset');
    return sendJson(
      res,
      200,
      queue.entries({
        ...(maxItems !== null ? { maxItems: Number.parseInt(maxItems, 10) } : {}),
        ...(offset !== null ? { offset: Number.parseInt(offset, 10) } : {}),
      }),
    );
  };

  const historyOp = async (req: IncomingMessage, res: ServerResponse) => {
    const read = await readJson(req);
    if (!read || !isObject(read.value)) return sendStatus(res, 500);
    if (read.value.clear) queue.deleteHistory();
    if (Array.isArray(read.value.delete)) for (const id of read.value.delete) queue.deleteHistory(String(id));
    return sendStatus(res, 200);
  };

  const param = (match: RegExpExecArray) => decodeURIComponent(match[1] as string);

  /** ComfyUI's routes, each also mounted under `/api`; `apiOnly` ones (newer builds' jobs API) only there. */
  const table: Route[] = [
    { method: 'POST', path: /^\/prompt$/, handle: (req, res) => submit(req, res) },
    { method: 'GET', path: /^\/prompt$/, handle: (_req, res) => sendJson(res, 200, queue.info()) },
    { method: 'GET', path: /^\/queue$/, handle: (_req, res) => sendJson(res, 200, queue.snapshot()) },
    { method: 'POST', path: /^\/queue$/, handle: readQueueOp },
    { method: 'POST', path: /^\/interrupt$/, handle: interrupt },
    { method: 'GET', path: /^\/history$/, handle: (_req, res, url) => historyList(res, url) },
    { method: 'POST', path: /^\/history$/, handle: historyOp },
    {
      method: 'GET',
      path: /^\/history\/([^/]+)$/,
      handle: (_req, res, _url, m) => sendJson(res, 200, queue.entries({ promptId: param(m) })),
    },
    { method: 'POST', path: /^\/upload\/image$/, handle: upload },
    { method: 'GET', path: /^\/view$/, handle: (req, res, url) => view(req, res, url.searchParams) },
    { method: 'GET', path: /^\/object_info$/, handle: (_req, res) => sendJson(res, 200, objectInfo()) },
    {
      method: 'GET',
      path: /^\/object_info\/([^/]+)$/,
      handle: (_req, res, _url, m) => sendJson(res, 200, objectInfo(param(m))),
    },
    { method: 'GET', path: /^\/models$/, handle: (_req, res) => sendJson(res, 200, MODEL_FOLDERS) },
    {
      method: 'GET',
      path: /^\/models\/([^/]+)$/,
      handle: (_req, res, _url, m) => {
        const folder = param(m) as ModelFolder;
        if (!MODEL_FOLDERS.includes(folder)) return sendStatus(res, 404);
        return sendJson(res, 200, installed.get(folder) ?? []);
      },
    },
    { method: 'GET', path: /^\/system_stats$/, handle: (_req, res) => sendJson(res, 200, systemStats()) },
    {
      method: 'GET',
      path: /^\/features$/,
      handle: (_req, res) =>
        sendJson(res, 200, { supports_preview_metadata: false, max_upload_size: 100 * 1024 * 1024 }),
    },
  ];
  if (deps.jobsApi) {
    table.push(
      {
        method: 'GET',
        path: /^\/jobs\/([^/]+)$/,
        apiOnly: true,
        handle: (_req, res, _url, m) => {
          const job = jobView(queue, param(m));
          return job ? sendJson(res, 200, job) : sendJson(res, 404, { error: 'Job not found' });
        },
      },
      {
        method: 'POST',
        path: /^\/jobs\/([^/]+)\/cancel$/,
        apiOnly: true,
        handle: (_req, res, _url, m) => sendJson(res, 200, { cancelled: queue.cancel(param(m)) }),
      },
    );
  }

  const route = async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> => {
    const api = url.pathname === '/api' || url.pathname.startsWith('/api/');
    const path = api ? url.pathname.slice(4) || '/' : url.pathname;
    const method = req.method === 'HEAD' ? 'GET' : (req.method ?? 'GET');
    const allowed = new Set(['GET', 'HEAD']);
    for (const entry of table) {
      if (entry.apiOnly && !api) continue;
      const match = entry.path.exec(path);
      if (!match) continue;
      if (entry.method === method) return entry.handle(req, res, url, match);
      allowed.add(entry.method);
    }
    // ComfyUI serves its web root as a static route at "/", so any other path answers GET and
    // HEAD (404 when no such file) and refuses other methods with 405.
    if (method === 'GET') return sendStatus(res, 404);
    return sendStatus(res, 405, { allow: [...allowed].sort().join(',') });
  };

  return route;
}

/** `GET /system_stats` as 0.3.64 answers it on a CPU-only machine (the "device" is the RAM). */
function systemStats() {
  const total = totalmem();
  const free = freemem();
  return {
    system: {
      os: process.platform === 'win32' ? 'nt' : 'posix',
      ram_total: total,
      ram_free: free,
      comfyui_version: COMFYUI_VERSION,
      required_frontend_version: '1.27.10',
      installed_templates_version: null,
      required_templates_version: '0.1.95',
      python_version: 'none (Kiln ComfyUI simulator)',
      pytorch_version: 'none',
      embedded_python: false,
      argv: ['kiln', 'sim', 'comfyui'],
    },
    devices: [
      {
        name: 'cpu',
        type: 'cpu',
        index: null,
        vram_total: total,
        vram_free: free,
        torch_vram_total: total,
        torch_vram_free: free,
      },
    ],
  };
}
