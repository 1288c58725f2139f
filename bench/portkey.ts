/**
 * Starts the Portkey gateway (`@portkey-ai/gateway`, its own Node server entry) for bench/overhead.ts:
 * `node --import tsx bench/portkey.ts --port=N --headless`, with NODE_ENV=production.
 *
 * One compatibility shim, applied only when it is needed: Portkey 1.15.2 appends its `x-portkey-*`
 * headers to the upstream's fetch Response, whose headers are immutable under @hono/node-server
 * > 1.14.2 (Portkey-AI/gateway#1389) — every streamed chat completion then fails with 500
 * "TypeError: immutable". npm resolves @hono/node-server to a newer 1.x here (shared with the MCP SDK),
 * so the shim gives Portkey's upstream responses a mutable copy of their headers — what the older
 * @hono/node-server did — at the cost of one Response wrapper per upstream call.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const entry = require.resolve('@portkey-ai/gateway/build/start-server.js');
// The @hono/node-server Portkey's entry resolves (its package.json is not exported: read it from disk).
const honoMain = createRequire(entry).resolve('@hono/node-server');
const honoRoot = honoMain.slice(0, honoMain.lastIndexOf(`${path.sep}dist${path.sep}`));
const honoVersion = (
  JSON.parse(readFileSync(path.join(honoRoot, 'package.json'), 'utf8')) as { version: string }
).version;
const [major = 0, minor = 0, patch = 0] = honoVersion.split('.').map(Number);
const affected = major > 1 || (major === 1 && (minor > 14 || (minor === 14 && patch > 2)));

if (affected) {
  const fetchUpstream = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const response = await fetchUpstream(input, init);
    return new Response(response.body, {
      status: response.status,
      statusText: response.statusText,
      headers: new Headers(response.headers),
    });
  };
  process.stderr.write(
    `portkey: @hono/node-server ${honoVersion} > 1.14.2, upstream response headers made mutable (Portkey-AI/gateway#1389)\n`,
  );
}

await import(pathToFileURL(entry).href);
