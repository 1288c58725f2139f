import type { JobRow } from '../store/types.js';
import { type ResponseStatus, responseError, responseObject } from './output.js';
import type { ResponseJobRequest } from './schema.js';

export const RESPONSE_PREFIX = 'resp_';

/** A UUIDv7's time, in Unix seconds: a response's `created_at`, from its id alone. */
export const createdAtOf = (uuid: string) =>
  Math.floor(Number.parseInt(uuid.replaceAll('-', '').slice(0, 12), 16) / 1000);

const STATUS: Record<JobRow['status'], ResponseStatus> = {
  queued: 'queued',
  running: 'in_progress',
  completed: 'completed',
  failed: 'failed',
  timeout: 'failed',
  cancelled: 'cancelled',
};

/** A response job as the Response object: what it stored when it ended, else what it is now. */
export function responseOf(job: JobRow): Record<string, unknown> {
  if (job.status === 'completed' && job.result !== null)
    return JSON.parse(job.result) as Record<string, unknown>;
  const request = JSON.parse(job.request) as ResponseJobRequest;
  return responseObject(
    {
      id: `${RESPONSE_PREFIX}${job.id}`,
      model: request.model,
      createdAt: createdAtOf(job.id),
      status: STATUS[job.status],
      error:
        job.error_code && job.status !== 'cancelled'
          ? responseError(job.error_code, job.error_message ?? '')
          : null,
      completedAt: null,
    },
    request.echo,
  );
}
