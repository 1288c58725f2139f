/**
 * Failures to rehearse against. `hang`, `drop-mid-stream` and `error` act on chat completions
 * (the engine misbehaves while its HTTP front still answers /health, /metrics and /sim/fault);
 * `refuse` closes the listening socket, so connects are refused until the fault is cleared.
 * `durationMs`, when given, clears the fault by itself after that long — the only way back from
 * `refuse` for a simulator driven over HTTP.
 */
export type Fault = (
  | { kind: 'hang' }
  /** Streams: the socket is destroyed after this many server-sent events; non-streams: before the answer. */
  | { kind: 'drop-mid-stream'; afterChunks: number }
  | { kind: 'error'; status: number; message?: string }
  | { kind: 'refuse' }
) & { durationMs?: number };

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isCount = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0;

/** A fault from its JSON form (`{}` clears: undefined), or a message saying what is wrong. */
export function parseFault(body: unknown): { fault: Fault | undefined } | { problem: string } {
  if (!isObject(body)) return { problem: 'the body must be a JSON object: a fault, or {} to clear' };
  if (body.kind === undefined && Object.keys(body).length === 0) return { fault: undefined };
  const duration = body.durationMs === undefined ? {} : { durationMs: body.durationMs as number };
  if (body.durationMs !== undefined && !isCount(body.durationMs)) {
    return { problem: 'durationMs must be a whole number of milliseconds' };
  }
  switch (body.kind) {
    case 'hang':
    case 'refuse':
      return { fault: { kind: body.kind, ...duration } };
    case 'drop-mid-stream':
      if (!isCount(body.afterChunks)) return { problem: 'afterChunks must be a whole number, 0 or more' };
      return { fault: { kind: body.kind, afterChunks: body.afterChunks, ...duration } };
    case 'error': {
      const status = body.status;
      if (!Number.isInteger(status) || (status as number) < 400 || (status as number) > 599) {
        return { problem: 'status must be an HTTP error status, 400 to 599' };
      }
      if (body.message !== undefined && typeof body.message !== 'string') {
        return { problem: 'message must be a string' };
      }
      const message = body.message === undefined ? {} : { message: body.message };
      return { fault: { kind: 'error', status: status as number, ...message, ...duration } };
    }
    default:
      return { problem: 'kind must be one of hang, drop-mid-stream, error, refuse' };
  }
}
