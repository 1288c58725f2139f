import type { IncomingMessage, ServerResponse } from 'node:http';
import { type VllmError, vllmError } from './protocol.js';

/** Request bodies beyond this are refused: a 32768-token prompt is about 128 KiB of text. */
const BODY_LIMIT = 16 * 1024 * 1024;

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

export const sendError = (res: ServerResponse, error: VllmError) => sendJson(res, error.status, error.body);

/** The body parsed as JSON, or the vLLM-shaped error to answer instead. */
export async function readJson(req: IncomingMessage): Promise<{ body: unknown } | { error: VllmError }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT) return { error: vllmError(413, `the request body is over ${BODY_LIMIT} bytes`) };
    chunks.push(chunk);
  }
  try {
    return { body: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
  } catch (error) {
    return { error: vllmError(400, `the request body is not valid JSON: ${(error as Error).message}`) };
  }
}
