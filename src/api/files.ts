import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { KilnError } from '../errors.js';
import { parseRange } from '../files/range.js';
import { type FileService, presentFile } from '../files/service.js';
import type { Store } from '../store/index.js';
import type { FileRow } from '../store/repos/files.js';
import { requireApiKey } from './auth.js';

interface ContentRequest {
  Params: { id: string };
  Querystring: { expires?: unknown; signature?: unknown };
}

const EXTENSIONS: Record<string, string> = {
  'image/png': '.png',
  'image/jpeg': '.jpg',
  'image/webp': '.webp',
  'image/gif': '.gif',
  'video/mp4': '.mp4',
  'video/webm': '.webm',
  'video/quicktime': '.mov',
};

/**
 * Produced files (DESIGN.md section 7). Register on the ROOT app, not the authenticated scope: the
 * content route also answers key-less requests that carry a valid signed URL, so it authenticates itself.
 */
export function fileRoutes(app: FastifyInstance, deps: { files: FileService; store: Store }): void {
  const authenticateKey = requireApiKey(deps.store);
  if (!app.hasRequestDecorator('auth')) app.decorateRequest('auth', null as never);

  app.get<{ Params: { id: string } }>('/v1/files/:id', { onRequest: authenticateKey }, async (request) => {
    const file = await deps.files.get(request.auth.org_id, request.params.id);
    return { ...presentFile(file), url: deps.files.signedUrl(file) };
  });

  app.delete<{ Params: { id: string } }>('/v1/files/:id', { onRequest: authenticateKey }, async (request) => {
    const file = await deps.files.delete(request.auth.org_id, request.params.id);
    return { id: file.id, object: 'file', deleted: true };
  });

  /** A valid signature is enough on its own; otherwise the bearer key's organisation must own the file. */
  async function authorise(
    request: FastifyRequest<ContentRequest>,
  ): Promise<{ file: FileRow; maxAge?: number }> {
    const { id } = request.params;
    const { expires, signature } = request.query;
    if (expires !== undefined || signature !== undefined) {
      const check = deps.files.verify(id, expires, signature);
      if (check === 'valid') {
        const maxAge = Math.max(0, Number(expires) - Math.floor(Date.now() / 1000));
        return { file: await deps.files.getSigned(id), maxAge };
      }
      if (!request.headers.authorization) throw signatureRefused(id, check, expires);
    }
    await authenticateKey(request);
    return { file: await deps.files.get(request.auth.org_id, id) };
  }

  app.route<ContentRequest>({
    method: ['GET', 'HEAD'],
    url: '/v1/files/:id/content',
    handler: async (request, reply) => {
      const { file, maxAge } = await authorise(request);
      const etag = `"${file.sha256}"`;
      // Only answers about the content carry its validators and caching terms; errors must not be cached.
      const describe = () =>
        reply
          .header('etag', etag)
          .header('last-modified', new Date(file.created_at).toUTCString())
          // A signed URL's answer may be reused while the URL works; a key's is revalidated (cheap: ETag).
          .header('cache-control', maxAge === undefined ? 'private, no-cache' : `private, max-age=${maxAge}`);
      if (matchesEtag(request.headers['if-none-match'], etag)) return describe().status(304).send();

      // If-Range naming another version (or a date) asks for the whole file.
      const ifRange = request.headers['if-range'];
      const answer =
        ifRange === undefined || ifRange === etag
          ? parseRange(request.headers.range, file.size_bytes)
          : ({ kind: 'full' } as const);
      if (answer.kind === 'unsatisfiable') return rangeNotSatisfiable(reply, file.size_bytes);
      const range = answer.kind === 'partial' ? answer.range : undefined;

      // Open the content before any header says what it is, so a missing object is a clean 404.
      let body: Awaited<ReturnType<FileService['content']>> | Buffer | undefined;
      if (request.method === 'HEAD') {
        if ((await deps.files.storage.stat(file.storage_key)) === undefined) {
          throw new KilnError('not-found', 'the content of this file is no longer stored');
        }
      } else {
        // An empty file has no byte to range over; a read of it would be a read of nothing anyway.
        body = file.size_bytes === 0 ? Buffer.alloc(0) : await deps.files.content(file, range);
      }

      describe()
        .header('accept-ranges', 'bytes')
        .header('content-type', file.content_type)
        .header('x-content-type-options', 'nosniff')
        .header('content-disposition', `inline; filename="${file.id}${EXTENSIONS[file.content_type] ?? ''}"`)
        .header('content-length', range ? range.end - range.start + 1 : file.size_bytes);
      if (range) {
        reply.status(206).header('content-range', `bytes ${range.start}-${range.end}/${file.size_bytes}`);
      }
      return reply.send(body);
    },
  });
}

function signatureRefused(id: string, check: 'expired' | 'invalid', expires: unknown): KilnError {
  if (check === 'expired') {
    const when = new Date(Number(expires) * 1000).toISOString();
    return new KilnError(
      'forbidden',
      `this signed URL expired at ${when}; get a fresh one from GET /v1/files/${id} or the job's result`,
    );
  }
  return new KilnError(
    'forbidden',
    'the signature of this file URL is not valid: use the URL exactly as Kiln issued it, or send an API key',
  );
}

/** Whether an If-None-Match header names `etag` (compared weakly, as RFC 9110 asks) or is `*`. */
export function matchesEtag(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  return header
    .split(',')
    .map((tag) => tag.trim().replace(/^W\//, ''))
    .some((tag) => tag === '*' || tag === etag);
}

/** 416 with `Content-Range: bytes *\/size` (the error handler keeps headers already set). */
function rangeNotSatisfiable(reply: FastifyReply, size: number): never {
  reply.header('accept-ranges', 'bytes').header('content-range', `bytes */${size}`);
  throw new KilnError(
    'range-not-satisfiable',
    `the requested range is outside the file, which is ${size} bytes long`,
  );
}
