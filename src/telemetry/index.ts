import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';

export type { Span } from '@opentelemetry/api';
export { traceRequests } from './http.js';
export {
  contextOf,
  currentTraceparent,
  errorType,
  failSpan,
  inSpan,
  SpanKind,
  traceHeaders,
  tracingOn,
} from './spans.js';

/** Tracing as a process runs it; `shutdown` exports what is still batched, then turns it off. */
export interface Telemetry {
  shutdown(): Promise<void>;
}

const OFF: Telemetry = { shutdown: async () => undefined };

/**
 * Starts tracing when `telemetry.otlp_endpoint` is set: the SDK is imported only then, so a
 * process without an endpoint never loads it, sends no `traceparent` and makes no span.
 */
export async function startTelemetry(settings: Config['telemetry'], log: Logger): Promise<Telemetry> {
  if (!settings.otlp_endpoint) return OFF;
  const { startSdk } = await import('./sdk.js');
  const sdk = startSdk({ endpoint: settings.otlp_endpoint, serviceName: settings.service_name }, log);
  // The endpoint's path and host only: a query string may hold a collector's token.
  const endpoint = new URL(settings.otlp_endpoint);
  log.info({ endpoint: `${endpoint.origin}${endpoint.pathname}` }, 'exporting traces (OTLP/HTTP)');
  return sdk;
}
