/**
 * The floor for a relay in Node on this machine, for bench/streams.ts: node:http in, an undici
 * dispatch handler out, each engine read written onto the client's socket as one HTTP chunk as it
 * arrives. No parsing, renaming, auth, job or store: what any Node gateway pays before doing anything.
 * Run as `tsx bench/streams/bare-relay.ts --port=N --upstream=URL`; answers GET /health.
 */
import http from 'node:http';
import { Pool } from 'undici';

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
    let started = false;
    pool.dispatch(
      {
        path: req.url ?? '/',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(parts),
      },
      {
        onRequestStart() {},
        onResponseStart(_controller, status) {
          res.writeHead(status, { 'content-type': 'text/event-stream' });
        },
        onResponseData(_controller, chunk: Buffer) {
          // The first read leaves with the headers; later ones as chunks of their own, one write each.
          if (!started || !res.socket) res.write(chunk);
          else res.socket.write(`${chunk.length.toString(16)}\r\n${chunk.toString('latin1')}\r\n`, 'latin1');
          started = true;
        },
        onResponseEnd() {
          res.end();
        },
        onResponseError(_controller, error) {
          res.destroy(error);
        },
      },
    );
  });
});

server.listen(Number(flag('port')), '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
