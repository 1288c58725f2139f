import { createServer, type IncomingHttpHeaders } from 'node:http';
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from 'node:net';
import { gunzipSync } from 'node:zlib';

/** A span as an OTLP/HTTP JSON export carries it, attributes flattened to plain values. */
export interface ExportedSpan {
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's numbers: 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, unknown>;
  status: { code?: number; message?: string };
  /** The `service.name` of the process that exported it. */
  service: string;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
type OtlpAttributes = Array<{ key: string; value: OtlpValue }> | undefined;

const flatten = (attributes: OtlpAttributes): Record<string, unknown> =>
  Object.fromEntries(
    (attributes ?? []).map(({ key, value }) => [
      key,
      value.stringValue ??
        (value.intValue !== undefined ? Number(value.intValue) : undefined) ??
        value.boolValue ??
        value.doubleValue,
    ]),
  );

/** An OTLP/HTTP traces endpoint on 127.0.0.1: keeps every span posted, and every raw body. */
export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>/v1/traces` */
  endpoint: string;
  spans: ExportedSpan[];
  /** Each request's body as text (JSON), to look for what must never be exported. */
  bodies: string[];
  /** Every request, whatever its path: with tracing off there must be none. */
  posts: number;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const sockets = new Set<Socket>();
  const receiver: OtlpReceiver = {
    endpoint: '',
    spans: [],
    bodies: [],
    posts: 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      receiver.posts++;
      let raw = Buffer.concat(chunks);
      if (request.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
      const text = raw.toString('utf8');
      receiver.bodies.push(text);
      if (request.url !== '/v1/traces' || !String(request.headers['content-type']).includes('json')) {
        response.writeHead(415).end();
        return;
      }
      const body = JSON.parse(text) as {
        resourceSpans?: Array<{
          resource?: { attributes?: OtlpAttributes };
          scopeSpans?: Array<{ spans?: Array<Record<string, unknown>> }>;
        }>;
      };
      for (const resourceSpans of body.resourceSpans ?? []) {
        const service = String(flatten(resourceSpans.resource?.attributes)['service.name']);
        for (const scope of resourceSpans.scopeSpans ?? []) {
          for (const span of scope.spans ?? []) {
            receiver.spans.push({
              traceId: String(span.traceId),
              spanId: String(span.spanId),
              parentSpanId: String(span.parentSpanId ?? ''),
              name: String(span.name),
              kind: Number(span.kind),
              attributes: flatten(span.attributes as OtlpAttributes),
              status: (span.status ?? {}) as ExportedSpan['status'],
              service,
            });
          }
        }
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
  return receiver;
}

/** One HTTP/1.1 request head a proxy saw go by. */
export interface SeenRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
}

/**
 * A TCP proxy on 127.0.0.1 in front of a simulator, which it leaves untouched: it pipes bytes both
 * ways (server-sent events and WebSockets too) and reads the request heads the client sent.
 */
export interface RecordingProxy {
  /** `http://127.0.0.1:<port>`: configure Kiln with this in place of the simulator's URL. */
  url: string;
  /** Every request head sent through the proxy so far. */
  requests(): SeenRequest[];
  /** Forgets what was seen. */
  clear(): void;
  close(): Promise<void>;
}

const REQUEST_HEAD = /(GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) (\S+) HTTP\/1\.1\r\n([\s\S]*?)\r\n\r\n/g;

export async function startRecordingProxy(target: string): Promise<RecordingProxy> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  /** What each client connection sent, as latin1 text (bodies included, which the pattern skips). */
  const streams: string[] = [];
  const server = createTcpServer((client) => {
    const index = streams.push('') - 1;
    const upstream = connect(Number(port), hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    }
    client.on('data', (chunk: Buffer) => {
      streams[index] += chunk.toString('latin1');
    });
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () =>
      streams.flatMap((text) =>
        [...text.matchAll(REQUEST_HEAD)].map(([, method, path, head]) => ({
          method: method as string,
          path: path as string,
          headers: Object.fromEntries(
            (head as string).split('\r\n').map((line) => {
              const colon = line.indexOf(':');
              return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()];
            }),
          ),
        })),
      ),
    // Connections stay open across a clear (keep-alive): what they send next is still seen.
    clear: () => streams.fill(''),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A webhook receiver on 127.0.0.1 that answers 200 and keeps each request's headers. */
export interface HookReceiver {
  url: string;
  hits: Array<{ path: string; headers: IncomingHttpHeaders }>;
  close(): Promise<void>;
}

export async function startHookReceiver(): Promise<HookReceiver> {
  const hits: HookReceiver['hits'] = [];
  const server = createServer((request, response) => {
    request.resume().on('end', () => {
      hits.push({ path: request.url ?? '', headers: request.headers });
      response.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The trace id and parent span id a `traceparent` header carries. */
export function parseTraceparent(
  header: string | undefined,
): { traceId: string; spanId: string } | undefined {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(header ?? '');
  return match ? { traceId: match[1] as string, spanId: match[2] as string } : undefined;
}
