import {
  type Attributes,
  type Context,
  context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapPropagator,
  type Tracer,
  trace,
} from '@opentelemetry/api';

export { SpanKind } from '@opentelemetry/api';

/**
 * What the instrumented code calls: spans, and the W3C trace context carried on outgoing requests
 * and on jobs. Only @opentelemetry/api is loaded here; while tracing is off (no OTLP endpoint) every
 * helper returns at its first line — no span object, no context switch, no header.
 */
interface Tracing {
  tracer: Tracer;
  propagator: TextMapPropagator;
}

let tracing: Tracing | undefined;

/** Turns tracing on (the SDK's tracer and propagator) or, with undefined, off again. Called by setup. */
export function useTracing(next: Tracing | undefined): void {
  tracing = next;
}

export const tracingOn = (): boolean => tracing !== undefined;

/** Shared and frozen: the headers an outgoing request adds while tracing is off. */
const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

export interface SpanSettings {
  kind?: SpanKind;
  attributes?: Attributes;
  /**
   * The parent, when it is not the active span: a job's or a delivery's stored traceparent (see
   * `contextOf`). Undefined means the active context.
   */
  parent?: Context;
  /**
   * The signal that stops `work` from outside (the caller cancelled or went away, a run limit, a
   * shutdown): a failure once it is aborted is recorded as `kiln.cancelled`, not as the span's error.
   */
  signal?: AbortSignal;
}

/**
 * Runs `work` inside a new span, active for everything it awaits; ends the span when `work`
 * settles, marked as an error if it throws (unless `settings.signal` stopped it). `work` gets
 * undefined while tracing is off.
 */
export async function inSpan<T>(
  name: string,
  settings: SpanSettings,
  work: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  const started = startSpan(name, settings);
  if (!started) return work(undefined);
  const { span } = started;
  try {
    return await context.with(started.context, () => work(span));
  } catch (error) {
    if (settings.signal?.aborted) span.setAttribute('kiln.cancelled', true);
    else failSpan(span, errorType(error));
    throw error;
  } finally {
    span.end();
  }
}

/**
 * What a span records of an error: its code (`engine-timeout`, `ECONNREFUSED`), else its class, never
 * its message (messages can quote the request: an engine's words about a prompt).
 */
export function errorType(error: unknown): string {
  if (!(error instanceof Error)) return 'unknown';
  const { code } = error as { code?: unknown };
  return typeof code === 'string' && code !== '' ? code : error.name;
}

/**
 * Marks a span failed, with `reason` a code or a class name (`engine-timeout`, `EngineError`, `503`),
 * never a message: nothing of a request belongs in a trace.
 */
export function failSpan(span: Span, reason: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: reason });
  span.setAttribute('error.type', reason);
}

/** Starts a span that the caller ends (an HTTP request's, whose end is another hook). */
export function startSpan(
  name: string,
  settings: SpanSettings,
): { span: Span; context: Context } | undefined {
  if (!tracing) return undefined;
  const parent = settings.parent ?? context.active();
  const span = tracing.tracer.startSpan(
    name,
    {
      kind: settings.kind ?? SpanKind.INTERNAL,
      ...(settings.attributes ? { attributes: settings.attributes } : {}),
    },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/** Runs `work` with `ctx` active; without tracing, just runs it. */
export function withContext<T>(ctx: Context | undefined, work: () => T): T {
  return ctx && tracing ? context.with(ctx, work) : work();
}

/**
 * `traceparent` (and `tracestate`) for an outgoing request, naming the active span as the parent
 * of whatever the receiver does; no headers while tracing is off or no span is active.
 */
export function traceHeaders(): Readonly<Record<string, string>> {
  if (!tracing) return NO_HEADERS;
  const headers: Record<string, string> = {};
  tracing.propagator.inject(context.active(), headers, defaultTextMapSetter);
  return headers;
}

/** The active span as a W3C `traceparent`, to store with work that runs later or elsewhere (a job). */
export function currentTraceparent(): string | null {
  if (!tracing) return null;
  return traceHeaders().traceparent ?? null;
}

/**
 * The context a stored or received `traceparent` names as the parent; a new root when there is
 * none or it is malformed (the propagator ignores what is not W3C trace context).
 */
export function contextOf(carrier: Record<string, string | string[] | undefined> | string | null): Context {
  if (!tracing || carrier === null) return ROOT_CONTEXT;
  const headers = typeof carrier === 'string' ? { traceparent: carrier } : carrier;
  return tracing.propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter);
}
