import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { cpus, freemem, totalmem } from 'node:os';
import type { SimFiles } from './files.js';
import { BodyTooLarge, isObject, readForm, readJson, sendJson, sendStatus, stripUndefined } from './http.js';
import { jobView } from './jobs.js';
import { type Input, MODEL_FOLDERS, type ModelFolder, NODE_CLASSES, nodeInfo } from './nodes.js';
import type { PromptQueue } from './queue.js';
import { validatePrompt } from './validate.js';

/** ComfyUI's HTTP routes over the simulator's files and queue; every one also under `/api`. */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function createRoutes(deps: {
  files: SimFiles;
  queue: PromptQueue;
  installed: Map<ModelFolder, string[]>;
}): (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void> {
  const { files, queue, installed } = deps;
  /** The next prompt's queue position (ComfyUI's `PromptServer.number`). */
  let number = 0;

  const choices = (input: Input) =>
    input.kind === 'combo'
      ? input.options
      : input.kind === 'files'
        ? (installed.get(input.folder) ?? [])
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
    extraData.create_time = Date.now();
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

  const view = (res: ServerResponse, query: URLSearchParams) => {
    const found = files.view(query);
    if (found.status !== 200) return sendStatus(res, found.status);
    res.writeHead(200, {
      'content-type': found.contentType,
      'content-disposition': `filename="${found.filename.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`,
      'x-content-type-options': 'nosniff',
    });
    createReadStream(found.path).pipe(res);
  };

  const objectInfo = (only?: string) =>
    Object.fromEntries(
      Object.entries(NODE_CLASSES)
        .filter(([name]) => only === undefined || name === only)
        .map(([name, node]) => [name, nodeInfo(name, node, choices)]),
    );

  const route = async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> => {
    const full = url.pathname;
    // Newer ComfyUI mounts its jobs API at /api/jobs only; everything else is served at / and /api.
    const jobs = /^\/api\/jobs\/([^/]+)(\/cancel)?$/.exec(full);
    if (jobs) {
      const id = decodeURIComponent(jobs[1] as string);
      if (jobs[2]) {
        if (req.method !== 'POST') return sendStatus(res, 405);
        return sendJson(res, 200, { cancelled: queue.cancel(id) });
      }
      if (req.method !== 'GET') return sendStatus(res, 405);
      const job = jobView(queue, id);
      return job ? sendJson(res, 200, job) : sendJson(res, 404, { error: 'Job not found' });
    }
    const path = full === '/api' || full.startsWith('/api/') ? full.slice(4) || '/' : full;
    const method = req.method ?? 'GET';
    const get = method === 'GET' || method === 'HEAD';
    const history = /^\/history\/([^/]+)$/.exec(path);
    if (history && get)
      return sendJson(res, 200, queue.entries({ promptId: decodeURIComponent(history[1] as string) }));
    const models = /^\/models\/([^/]+)$/.exec(path);
    if (models && get) {
      const folder = decodeURIComponent(models[1] as string) as ModelFolder;
      if (!MODEL_FOLDERS.includes(folder)) return sendStatus(res, 404);
      return sendJson(res, 200, installed.get(folder) ?? []);
    }
    const info = /^\/object_info\/([^/]+)$/.exec(path);
    if (info && get) return sendJson(res, 200, objectInfo(decodeURIComponent(info[1] as string)));

    switch (`${get ? 'GET' : method} ${path}`) {
      case 'POST /prompt':
        return submit(req, res);
      case 'GET /prompt':
        return sendJson(res, 200, queue.info());
      case 'GET /queue':
        return sendJson(res, 200, queue.snapshot());
      case 'POST /queue': {
        const read = await readJson(req);
        if (!read || !isObject(read.value)) return sendStatus(res, 500);
        if (read.value.clear) queue.clear();
        if (Array.isArray(read.value.delete)) for (const id of read.value.delete) queue.delete(String(id));
        return sendStatus(res, 200);
      }
      case 'POST /interrupt': {
        const read = await readJson(req);
        const id = read && isObject(read.value) ? read.value.prompt_id : undefined;
        queue.interrupt(typeof id === 'string' && id !== '' ? id : undefined);
        return sendStatus(res, 200);
      }
      case 'GET /history': {
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
      }
      case 'POST /history': {
        const read = await readJson(req);
        if (!read || !isObject(read.value)) return sendStatus(res, 500);
        if (read.value.clear) queue.deleteHistory();
        if (Array.isArray(read.value.delete))
          for (const id of read.value.delete) queue.deleteHistory(String(id));
        return sendStatus(res, 200);
      }
      case 'POST /upload/image':
        return upload(req, res);
      case 'GET /view':
        return view(res, url.searchParams);
      case 'GET /object_info':
        return sendJson(res, 200, objectInfo());
      case 'GET /models':
        return sendJson(res, 200, MODEL_FOLDERS);
      case 'GET /system_stats':
        return sendJson(res, 200, systemStats());
      case 'GET /features':
        return sendJson(res, 200, { supports_preview_metadata: false, max_upload_size: 100 * 1024 * 1024 });
      default:
        return sendStatus(res, 404);
    }
  };

  return route;
}

function systemStats() {
  return {
    system: {
      os: process.platform,
      ram_total: totalmem(),
      ram_free: freemem(),
      comfyui_version: '0.0.0-kiln-sim',
      python_version: 'none (Kiln ComfyUI simulator)',
      pytorch_version: 'none',
      embedded_python: false,
      argv: ['kiln', 'sim', 'comfyui'],
    },
    devices: [
      {
        name: `cpu (${cpus()[0]?.model ?? 'unknown'}), simulated`,
        type: 'cpu',
        index: 0,
        vram_total: 0,
        vram_free: 0,
        torch_vram_total: 0,
        torch_vram_free: 0,
      },
    ],
  };
}
