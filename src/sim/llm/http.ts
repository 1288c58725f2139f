import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Flavor } from './flavor.js';
import type { SimError } from './protocol.js';

/** Request bodies beyond this are refused: a 32768-token prompt is about 128 KiB of text. */
const BODY_LIMIT = 16 * 1024 * 1024;

/** A JSON answer with the flavor's headers (null: an empty body). */
export function sendJson(
  res: ServerResponse,
  flavor: Flavor,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) {
  if (body === null) {
    res.writeHead(status, { ...flavor.headers, 'content-length': 0, ...headers }).end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...flavor.headers,
    'content-type': flavor.jsonContentType,
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

export const sendError = (res: ServerResponse, flavor: Flavor, error: SimError) =>
  sendJson(res, flavor, error.status, error.body);

/** The body parsed as JSON, or the flavor's error to answer instead. */
export async function readJson(
  req: IncomingMessage,
  flavor: Flavor,
): Promise<{ body: unknown } | { error: SimError }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT)
      return { error: flavor.error(413, `the request body is over ${BODY_LIMIT} bytes`) };
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return { body: JSON.parse(text) };
  } catch (error) {
    return { error: flavor.invalidJson(text, error as Error) };
  }
}
