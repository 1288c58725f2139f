import type { IncomingMessage, ServerResponse } from 'node:http';

/** ComfyUI's default `--max-upload-size`: 100 MB. */
export const BODY_LIMIT = 100 * 1024 * 1024;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * aiohttp's plain answers: `200` with an empty body (typed `application/octet-stream`, as
 * `web.Response(status=200)` is), `404: Not Found`, `405: Method Not Allowed` (with `Allow`),
 * `500 Internal Server Error`.
 */
export function sendStatus(res: ServerResponse, status: number, headers: Record<string, string> = {}): void {
  const text =
    status === 200
      ? ''
      : status === 500
        ? '500 Internal Server Error\n\nServer got itself in trouble'
        : `${status}: ${{ 400: 'Bad Request', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 413: 'Request Entity Too Large' }[status] ?? 'Error'}`;
  res.writeHead(status, {
    ...headers,
    'content-type': status === 200 ? 'application/octet-stream' : 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

export class BodyTooLarge extends Error {}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT) throw new BodyTooLarge(`the request body is over ${BODY_LIMIT} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The body as JSON, or undefined when it is not JSON (aiohttp's `request.json()` would raise). */
export async function readJson(req: IncomingMessage): Promise<{ value: unknown } | undefined> {
  const body = await readBody(req);
  try {
    return { value: JSON.parse(body.toString('utf8')) };
  } catch {
    return undefined;
  }
}

/** A multipart/form-data body's fields, parsed by the platform's FormData. */
export async function readForm(req: IncomingMessage): Promise<FormData> {
  const body = await readBody(req);
  return new Request('http://sim/upload', {
    method: 'POST',
    headers: { 'content-type': req.headers['content-type'] ?? '' },
    body,
  }).formData();
}

export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The object without its undefined properties. */
export const stripUndefined = <T extends object>(object: T) =>
  Object.fromEntries(Object.entries(object).filter(([, v]) => v !== undefined)) as Partial<T>;
