/**
 * The floor for a relay in Node on this machine, for bench/streams.ts: node:http in, an undici
 * dispatch handler out, each engine read written onto the client's socket as one HTTP chunk as it
 * arrives. No parsing, renaming, auth, job or store: what any Node gateway pays before doing anything.
 * Run as `tsx bench/streams/bare-relay.ts --port=N --upstream=URL`; answers GET /health.
 */
import http from 'node:http';
import { Pool } from 'undici';
import { relayTo } from './relay-handler.js';

const flag = (name: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(`--${name}=`.length) ?? '';
const upstream = flag('upstream');
const pool = new Pool(upstream, { connections: 8192, pipelining: 1 });

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') {
    res.end('ok');
    return;
  }
  const parts: Buffer[] = [];
  req.on('data', (part: Buffer) => parts.push(part));
  req.on('end', () => {
    pool.dispatch(
      {
        path: req.url ?? '/',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(parts),
      },
      relayTo(res),
    );
  });
});

server.listen(Number(flag('port')), '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
