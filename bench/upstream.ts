/**
 * A canned OpenAI-compatible upstream for the benches: answers every chat completion with the same
 * small body (or, for `stream: true`, the same short SSE sequence) written at once, so what a gateway
 * in front of it adds is what gets measured. Not the simulator: no timing model, no KV cache — just
 * node:http and precomputed strings. Run in a process of its own:
 * `node --import tsx bench/upstream.ts [--port=N] [--chunks=C --gap-ms=G]`; prints `{"url": …}` on
 * stdout once it listens.
 *
 * Trickle mode (`--chunks=C`, for bench/streams.ts): a stream is instead C content chunks, or
 * `max_tokens` of them when the request asks for fewer (the first also carrying the role; their text
 * from bench/streams/pieces.ts), the first written at once and
 * each next G ms (default 20) after the one before, on a timer of its own, then the finish chunk, the
 * usage chunk when asked for and `data: [DONE]`. Non-stream answers stay the canned completion.
 */
import http from 'node:http';
import { tricklePiece } from './streams/pieces.js';

const MODEL = 'bench-model';
const CREATED = 1_790_000_000;
const ID = 'chatcmpl-canned';
const PIECES = ['Hello', ' from', ' the', ' canned', ' upstream.'];
const USAGE = { prompt_tokens: 12, completion_tokens: PIECES.length, total_tokens: 12 + PIECES.length };

const completion = JSON.stringify({
  id: ID,
  object: 'chat.completion',
  created: CREATED,
  model: MODEL,
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: PIECES.join('') },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: USAGE,
});

const chunk = (delta: Record<string, unknown>, finish: string | null, usage?: typeof USAGE) =>
  `data: ${JSON.stringify({
    id: ID,
    object: 'chat.completion.chunk',
    created: CREATED,
    model: MODEL,
    choices: usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(usage ? { usage } : {}),
  })}\n\n`;

const finishEvent = chunk({}, 'stop');
/** Role, one event per piece, finish; the usage event only when asked for; then [DONE]. */
const streamEvents = [
  chunk({ role: 'assistant', content: '' }, null),
  ...PIECES.map((content) => chunk({ content }, null)),
  finishEvent,
];
const usageEvent = chunk({}, null, USAGE);
const DONE = 'data: [DONE]\n\n';

const flag = (name: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(`--${name}=`.length);
/** Trickle mode: content chunks per stream (0: the canned stream, all at once) and the ms between them. */
const CHUNKS = Number(flag('chunks') ?? 0);
const GAP_MS = Number(flag('gap-ms') ?? 20);
const trickleEvents = Array.from({ length: CHUNKS }, (_, i) =>
  chunk(i === 0 ? { role: 'assistant', content: tricklePiece(i) } : { content: tricklePiece(i) }, null),
);
/** The usage chunk of a trickled stream of `count` content chunks, made once per count. */
const trickleUsageEvents = new Map<number, string>();
function trickleUsageEvent(count: number): string {
  let event = trickleUsageEvents.get(count);
  if (event === undefined) {
    event = chunk({}, null, {
      prompt_tokens: USAGE.prompt_tokens,
      completion_tokens: count,
      total_tokens: USAGE.prompt_tokens + count,
    });
    trickleUsageEvents.set(count, event);
  }
  return event;
}

/**
 * Trickle mode: `count` content chunks (at most CHUNKS), one now and one every GAP_MS, then the end
 * of the stream.
 */
function trickle(res: http.ServerResponse, includeUsage: boolean, count: number): void {
  let next = 0;
  const tick = () => {
    res.write(trickleEvents[next++] as string);
    if (next < count) return;
    clearInterval(timer);
    res.write(finishEvent);
    if (includeUsage) res.write(trickleUsageEvent(count));
    res.end(DONE);
  };
  const timer = setInterval(tick, GAP_MS);
  res.once('close', () => clearInterval(timer));
  tick();
}

const models = JSON.stringify({
  object: 'list',
  data: [{ id: MODEL, object: 'model', created: CREATED, owned_by: 'bench' }],
});

function send(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = req.url ?? '/';
  if (req.method === 'GET' && url === '/health') return send(res, 200, '{"status":"ok"}');
  if (req.method === 'GET' && url === '/v1/models') return send(res, 200, models);
  if (req.method !== 'POST' || url !== '/v1/chat/completions')
    return send(res, 404, '{"error":{"message":"not found"}}');
  const parts: Buffer[] = [];
  req.on('data', (part: Buffer) => parts.push(part));
  req.on('end', () => {
    let body: {
      stream?: boolean;
      stream_options?: { include_usage?: boolean } | null;
      max_tokens?: number;
    };
    try {
      body = JSON.parse(Buffer.concat(parts).toString('utf8'));
    } catch {
      return send(res, 400, '{"error":{"message":"body is not JSON"}}');
    }
    if (body.stream !== true) return send(res, 200, completion);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (CHUNKS > 0) {
      // An engine stops at max_tokens: a stream asked for fewer chunks than CHUNKS gets that many.
      const asked = body.max_tokens;
      const count = typeof asked === 'number' && asked >= 1 ? Math.min(CHUNKS, Math.floor(asked)) : CHUNKS;
      return trickle(res, body.stream_options?.include_usage === true, count);
    }
    // One write per event, as an engine sends them; all at once, as nothing is generated.
    for (const event of streamEvents) res.write(event);
    if (body.stream_options?.include_usage === true) res.write(usageEvent);
    res.end(DONE);
  });
});
server.keepAliveTimeout = 60_000;

server.listen(Number(flag('port') ?? 0), '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}` })}\n`);
});
process.on('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
