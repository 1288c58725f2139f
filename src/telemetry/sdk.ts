import { context, type DiagLogger, DiagLogLevel, diag, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import { VERSION } from '../version.js';
import { useTracing } from './spans.js';

/**
 * The OpenTelemetry SDK, loaded only when an OTLP endpoint is configured (index.ts imports this
 * file dynamically). Spans are batched and posted as OTLP/HTTP JSON; the SDK's standard OTEL_*
 * variables (sampler, batch sizes, exporter headers and timeout) apply as they do anywhere.
 */
export function startSdk(
  settings: { endpoint: string; serviceName: string },
  log: Logger,
): { shutdown(): Promise<void> } {
  const exporter = new OTLPTraceExporter({ url: settings.endpoint });
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': settings.serviceName, 'service.version': VERSION }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  const propagator = new W3CTraceContextPropagator();
  const contextManager = new AsyncLocalStorageContextManager().enable();
  // Global, so that other instrumentation in the process (an APM agent's) nests under Kiln's spans;
  // a process that already has its own keeps them, and Kiln's spans still go to the endpoint.
  const registered = {
    diag: diag.setLogger(diagnostics(log), { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true }),
    context: context.setGlobalContextManager(contextManager),
    trace: trace.setGlobalTracerProvider(provider),
    propagation: propagation.setGlobalPropagator(propagator),
  };
  if (!registered.context) {
    contextManager.disable();
    log.warn('another OpenTelemetry context manager is registered in this process; Kiln uses it');
  }
  useTracing({ tracer: provider.getTracer('kiln', VERSION), propagator });
  return {
    async shutdown() {
      useTracing(undefined);
      // Whatever is still batched goes out now, within a bound: a collector that is gone must not
      // hold up a stop.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        provider.shutdown().catch((error: unknown) => log.warn({ err: error }, 'flushing traces failed')),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, 5000);
        }),
      ]);
      clearTimeout(timer);
      if (registered.trace) trace.disable();
      if (registered.propagation) propagation.disable();
      if (registered.context) context.disable();
      if (registered.diag) diag.disable();
    },
  };
}

/** The SDK's own complaints (an unreachable collector, a full queue) as Kiln log lines. */
function diagnostics(log: Logger): DiagLogger {
  const warn = (message: string, ...args: unknown[]) =>
    log.warn(
      { detail: [message, ...args.map(String)].join(' ').slice(0, 2000) },
      'the OpenTelemetry SDK reported a problem; spans may be lost',
    );
  const quiet = () => undefined;
  return { error: warn, warn, info: quiet, debug: quiet, verbose: quiet };
}
