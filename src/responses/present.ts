import type { JobRow } from '../store/types.js';
import { type ResponseStatus, responseError, responseObject } from './output.js';
import type { Item, ResponseJobRequest } from './schema.js';

export const RESPONSE_PREFIX = 'resp_';

/** A UUIDv7's time, in Unix seconds: a response's `created_at`, from its id alone. */
export const createdAtOf = (uuid: string) =>
  Math.floor(Number.parseInt(uuid.replaceAll('-', '').slice(0, 12), 16) / 1000);

const ITEM_PREFIX: Record<string, string> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
};

/**
 * The request's input items with ids: the caller's own where given, else one made from the
 * response's id and the item's place, so every listing shows the same ids.
 */
export function inputItemsOf(uuid: string, request: ResponseJobRequest): Item[] {
  const hex = uuid.replaceAll('-', '');
  return request.input.map((item, i) => {
    const id = item.id ?? `${ITEM_PREFIX[item.type] ?? 'item'}_${hex}${i.toString(16).padStart(4, '0')}`;
    if (item.type !== 'message') return { status: 'completed', ...item, id };
    // An assistant message is listed as the output message it was; an image part with its detail.
    const parts = (item.content as Array<Record<string, unknown>>).map((part) => {
      if (part.type === 'output_text') return { annotations: [], logprobs: [], ...part };
      if (part.type === 'input_image') return { detail: 'auto', ...part };
      return part;
    });
    return { ...item, id, ...(item.role === 'assistant' ? { status: 'completed' } : {}), content: parts };
  });
}

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
