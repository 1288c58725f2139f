import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** Where `npm run build` writes the console (console/build.ts): the same place from src/ and dist/. */
export const CONSOLE_BUILD = fileURLToPath(new URL('../../dist/public/console/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * The console's pages may talk to this gateway only; media come from its signed file URLs, and
 * a chosen keyframe is shown from a blob: or data: URL before it is sent.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[path.extname(name)];
    if (!type) continue;
    const body = readFileSync(path.join(dir, name));
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
    assets.set(name, { body, type, etag });
  }
  return assets;
}

/**
 * The console at /console: a single page (hash-routed) and its assets under /console/assets/,
 * held in memory. A build without the console (`npm run build` not run) serves none, and the
 * landing page says so.
 */
export function consoleRoutes(app: FastifyInstance, dir = CONSOLE_BUILD): boolean {
  if (!existsSync(path.join(dir, 'index.html'))) return false;
  const assets = loadAssets(dir);
  const send = (name: string, cache: string) => (request: FastifyRequest, reply: FastifyReply) => {
    const asset = assets.get(name);
    if (!asset) return reply.callNotFound();
    reply.header('etag', asset.etag).header('cache-control', cache).header('content-security-policy', CSP);
    reply.header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer');
    if (request.headers['if-none-match'] === asset.etag) return reply.code(304).send();
    return reply.type(asset.type).send(asset.body);
  };
  const page = send('index.html', 'no-cache');
  app.get('/console', { schema: { hide: true } }, page);
  app.get('/console/', { schema: { hide: true } }, page);
  app.get<{ Params: { name: string } }>(
    '/console/assets/:name',
    { schema: { hide: true } },
    (request, reply) =>
      // Asset names carry no hash: revalidate, but cheaply (ETag, 304).
      send(request.params.name, 'no-cache')(request, reply),
  );
  return true;
}
