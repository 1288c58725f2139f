import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { authenticate } from '../auth/keys.js';
import type { Runtime } from '../runtime.js';
import { METRICS_CONTENT_TYPE, metricsText } from './routes.js';

/**
 * GET /metrics on a port of its own, for a process without the API (`kiln worker`), whose jobs,
 * engine calls and webhook deliveries are counted nowhere else. The same text and the same rule as
 * the gateway's: a live key, or none with `metrics.open`. Nothing else is served.
 */
export async function listenForScrapes(
  runtime: Runtime,
  logger: Logger,
): Promise<{ url: string; close(): Promise<void> }> {
  const { host, metrics } = runtime.config;
  const render = metricsText(runtime);
  const server = createServer((request, response) => {
    const answer = (status: number, text: string, type = 'text/plain; charset=utf-8') =>
      response.writeHead(status, { 'content-type': type }).end(text);
    void (async () => {
      if (request.method !== 'GET' || new URL(request.url ?? '/', 'http://x').pathname !== '/metrics') {
        return answer(404, 'not found: this listener serves GET /metrics only\n');
      }
      if (!metrics.open) {
        const bearer = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '')?.[1];
        if (!bearer || !(await authenticate(runtime.store, bearer))) {
          return answer(401, 'a live API key is required: Authorization: Bearer <key>\n');
        }
      }
      answer(200, await render(logger), METRICS_CONTENT_TYPE);
    })().catch((error: unknown) => {
      logger.error({ err: error }, 'serving /metrics failed');
      if (!response.headersSent) answer(500, 'internal error\n');
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(metrics.port, host, () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  const url = `http://${address.includes(':') ? `[${address}]` : address}:${port}/metrics`;
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
