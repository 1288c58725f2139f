import type { JobRow } from '../store/types.js';
import type { JobKind, KindRegistry } from './kinds.js';

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const PUBLIC_ID = new RegExp(`^(?:([a-z]+[-_]))?(${UUID})$`);

/** `chatcmpl-<uuid>`, `resp_<uuid>` or `<uuid>` → the UUID and the prefix given, if any; undefined for anything else. */
export function parseJobId(text: string): { id: string; prefix: string | undefined } | undefined {
  const match = PUBLIC_ID.exec(text.toLowerCase());
  return match ? { id: match[2] as string, prefix: match[1] } : undefined;
}

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));
const parse = (text: string | null): unknown => (text === null ? undefined : JSON.parse(text));

/** The poll body: the same bytes for every poll of a terminal job, and what its webhook carries. */
export function pollBody(
  job: JobRow,
  kinds: KindRegistry,
  signUrl?: (fileId: string) => string,
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    id: `${kinds.prefixOf(job)}${job.id}`,
    object: 'job',
    kind: job.kind,
    status: job.status,
    created: seconds(job.created_at),
    started_at: seconds(job.started_at),
    finished_at: seconds(job.finished_at),
  };
  if (job.progress !== null) body.progress = job.progress;
  if (job.result !== null) body.result = signUrl ? resigned(parse(job.result), signUrl) : parse(job.result);
  if (job.error_code !== null) {
    body.code = job.error_code;
    body.message = job.error_message;
    // Extra top-level fields a kind attaches to its failures, e.g. `model` and `upstreamError`.
    Object.assign(body, parse(job.error_details) ?? {});
  }
  return body;
}

/**
 * `result` with a fresh signature on every produced file's `url` (a video's, each image's): the URL
 * stored when the job finished expires after `files.url_ttl`, while the job stays pollable longer.
 */
function resigned(result: unknown, signUrl: (fileId: string) => string): unknown {
  const fresh = (item: unknown) => {
    if (!item || typeof item !== 'object') return item;
    const { file_id: fileId, url } = item as { file_id?: unknown; url?: unknown };
    return typeof fileId === 'string' && typeof url === 'string' ? { ...item, url: signUrl(fileId) } : item;
  };
  const top = fresh(result) as { data?: unknown };
  return Array.isArray(top?.data) ? { ...top, data: top.data.map(fresh) } : top;
}

/**
 * A stored webhook body (a poll body) with fresh signatures on its produced files' URLs, for an
 * attempt made long after the job ended; a body without files is sent as stored.
 */
export function resignedBody(body: string, signUrl: (fileId: string) => string): string {
  if (!body.includes('"file_id"')) return body;
  const poll = JSON.parse(body) as { result?: unknown };
  return poll.result === undefined
    ? body
    : JSON.stringify({ ...poll, result: resigned(poll.result, signUrl) });
}

/** The 202 answer to an async submission. */
export function submissionBody(job: JobRow, kind: JobKind, request: unknown): Record<string, unknown> {
  return {
    id: `${kind.idPrefix}${job.id}`,
    object: kind.submissionObject,
    status: 'queued',
    polling_url: `${kind.pollingBase}${job.id}`,
    created: seconds(job.created_at),
    ...(kind.submissionExtras?.(request) ?? {}),
  };
}
