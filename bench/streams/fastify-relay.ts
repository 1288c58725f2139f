/**
 * The bare relay (bench/streams/bare-relay.ts) behind Fastify, for bench/streams/probe.ts: what the
 * framework Kiln is built on costs a stream before Kiln does anything. The body is parsed and checked
 * against a schema by Fastify, sent on as JSON, and the engine's reads are written as the bare relay
 * writes them. Run as `tsx bench/streams/fastify-relay.ts --port=N --upstream=URL`; answers GET /health.
 */
import Fastify from 'fastify';
import { pino } from 'pino';
import { Pool } from 'undici';
import { relayTo } from './relay-handler.js';

const flag = (name: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(`--${name}=`.length) ?? '';
const pool = new Pool(flag('upstream'), { connections: 8192, pipelining: 1 });
const app = Fastify({ loggerInstance: pino({ level: 'warn' }) });

const ChatBody = {
  type: 'object',
  required: ['model', 'messages'],
  properties: { model: { type: 'string' }, messages: { type: 'array' }, stream: { type: 'boolean' } },
} as const;

app.get('/health', async () => 'ok');
app.post('/v1/chat/completions', { schema: { body: ChatBody } }, (request, reply) => {
  reply.hijack();
  pool.dispatch(
    {
      path: '/v1/chat/completions',
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(request.body),
    },
    relayTo(reply.raw),
  );
});

await app.listen({ port: Number(flag('port')), host: '127.0.0.1' });
process.on('SIGTERM', () => process.exit(0));
