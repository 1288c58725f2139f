import { setTimeout as sleep } from 'node:timers/promises';
import type { ListContextsQuery, SaveContextBody } from '../contexts/schemas.js';
import type {
  ContextList,
  ContextRecord,
  ContextsPort,
  ContextWithContent,
  SavePrecondition,
} from '../contexts/service.js';
import type { ErrorBody } from '../errors.js';
import type { JOB_STATUSES, ListJobsQuery } from '../jobs/schemas.js';
import {
  type ChatChunk,
  type ChatCompletion,
  type ChatRequest,
  type ChatSubmission,
  chatChunks,
  type SubmitOptions,
  statusOfCode,
  typeOfCode,
} from './chat.js';
import {
  type Downloaded,
  type DownloadOptions,
  type ImageRequest,
  type ImageSubmission,
  type ImagesResult,
  saveBody,
  type TransitionRequest,
  type VideoGenerationRequest,
  type VideoSubmission,
} from './media.js';
import { explainFetchFailure, GatewayUnreachableError, shownUrl } from './network.js';

export type { ContextList, ContextRecord, ContextWithContent } from '../contexts/service.js';
export type { ListJobsQuery } from '../jobs/schemas.js';
export type {
  ChatChunk,
  ChatCompletion,
  ChatMessage,
  ChatRequest,
  ChatSubmission,
  SubmitOptions,
} from './chat.js';
export { contentOf, deltaOf } from './chat.js';
export type {
  Downloaded,
  DownloadOptions,
  DownloadProgress,
  ImageRequest,
  ImageSubmission,
  ImagesResult,
  TransitionRequest,
  VideoGenerationRequest,
  VideoResult,
  VideoSubmission,
} from './media.js';
export { GatewayUnreachableError } from './network.js';

/**
 * A non-2xx answer from the gateway, carrying its error envelope. An error that ends a stream after
 * its 200 is one too, with the status its code has (what a sync request would have answered).
 */
export class KilnApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
    /** The URL that answered (without its query), when the error is an HTTP answer. */
    readonly url?: string,
    /** Seconds the answer asked the client to wait before trying again (Retry-After), when it said. */
    readonly retryAfter?: number,
    /** What the answer carried beside its error (a 412's `context`, a failed job's `job`). */
    readonly attached?: Record<string, unknown>,
  ) {
    super(body.message);
    this.name = 'KilnApiError';
  }

  toBody(): ErrorBody {
    return this.body;
  }
}

export type JobStatus = (typeof JOB_STATUSES)[number];

/** Statuses a job never leaves. */
export const TERMINAL_STATUSES: readonly JobStatus[] = ['completed', 'failed', 'cancelled', 'timeout'];

/** A job's poll body (`GET /v1/jobs/{id}`), of any kind. */
export interface Job {
  id: string;
  object: 'job';
  kind: string;
  status: JobStatus;
  created: number;
  started_at: number | null;
  finished_at: number | null;
  /** 0–1, once the handler reports it. */
  progress?: number;
  /** Once completed: the kind's result (a chat.completion for chat). */
  result?: unknown;
  /** Once failed, cancelled or timed out: why. */
  code?: string;
  message?: string;
  [field: string]: unknown;
}

/** A page of jobs, newest first. */
export interface JobList {
  object: 'list';
  data: Job[];
  has_more: boolean;
  last_id: string | null;
}

/** One entry of `GET /v1/models`: a persona or a model the fleet serves. */
export interface Model {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  kind: 'persona' | 'chat' | 'image' | 'video';
  /** A local replica for it is up. */
  ready: boolean;
}

export interface WaitOptions {
  /** Time between polls (default 1000 ms). */
  intervalMs?: number;
  /** Give up after this long with a JobWaitTimeoutError (default: never). */
  timeoutMs?: number;
  /**
   * How long polls may keep failing in a row (no answer, or 502/503/504, as while the gateway
   * restarts) before the wait gives up with a JobPollError (default 60 000 ms, and never past
   * timeoutMs). The job goes on meanwhile. No answer to the first poll fails at once: nothing has
   * answered at that address yet.
   */
  retryMs?: number;
  /** Called with each poll of the job while it is not yet terminal. */
  onProgress?: (job: Job) => void;
  /** Called when a poll failed and is tried again after `delayMs`; `attempt` counts from 1 in each run of failures. */
  onRetry?: (error: GatewayUnreachableError | KilnApiError, delayMs: number, attempt: number) => void;
  signal?: AbortSignal;
}

/** `jobs.wait` gave up before the job was terminal; the job goes on. */
export class JobWaitTimeoutError extends Error {
  constructor(
    /** The job as the last poll saw it; undefined when no poll answered before the deadline. */
    readonly job: Job | undefined,
    timeoutMs: number,
    id = job?.id ?? '',
  ) {
    super(
      job
        ? `job ${id} is still ${job.status} after ${timeoutMs / 1000} s; it goes on (kiln jobs get ${id})`
        : `job ${id}: no poll was answered within ${timeoutMs / 1000} s; it goes on (kiln jobs get ${id})`,
    );
    this.name = 'JobWaitTimeoutError';
  }
}

/** `jobs.wait` gave up after polls kept failing (the gateway unreachable or unavailable); the job goes on. */
export class JobPollError extends Error {
  constructor(
    readonly id: string,
    /** The last poll's failure. */
    override readonly cause: Error,
    failingMs: number,
  ) {
    super(
      `stopped waiting for job ${id} after ${Math.round(failingMs / 1000)} s of failed polls; the job goes on (kiln jobs wait ${id})`,
    );
    this.name = 'JobPollError';
  }
}

/** A poll that may succeed if sent again: no answer at all, or a gateway (or its proxy) that is restarting. */
const isTransient = (error: unknown): error is GatewayUnreachableError | KilnApiError =>
  error instanceof GatewayUnreachableError ||
  (error instanceof KilnApiError && [502, 503, 504].includes(error.status));

/** The delay before retrying a failed poll: what Retry-After asked, else 0.5 s doubling up to 5 s. */
const retryDelay = (error: Error, attempt: number) =>
  error instanceof KilnApiError && error.retryAfter !== undefined
    ? error.retryAfter * 1000
    : Math.min(5000, 500 * 2 ** attempt);

/** Retry-After in seconds (a number of seconds or an HTTP date), or undefined when absent or unreadable. */
function retryAfterOf(response: Response): number | undefined {
  const value = response.headers.get('retry-after');
  if (value === null) return undefined;
  const seconds = /^\d+$/.test(value.trim()) ? Number(value) : (Date.parse(value) - Date.now()) / 1000;
  return Number.isFinite(seconds) ? Math.max(0, seconds) : undefined;
}

/** A job id for a URL: a public id (`chatcmpl-…`), a bare UUID, or a polling_url (its last segment). */
const jobPath = (id: string) =>
  `/v1/jobs/${encodeURIComponent(id.replace(/\/+$/, '').split('/').pop() ?? id)}`;

/** The error a job that ended without completing stands for, as a sync request would have answered it. */
export function jobFailure(job: Job): KilnApiError {
  const code = job.code ?? (job.status === 'cancelled' ? 'cancelled' : 'inference-failed');
  return new KilnApiError(statusOfCode(code), {
    type: typeOfCode(code),
    code,
    message: job.message ?? `the job ended ${job.status}`,
  });
}

export interface ClientOptions {
  baseUrl: string;
  apiKey: string;
  fetch?: typeof fetch;
  /**
   * Said after "is `kiln serve` running at <baseUrl>?" when the gateway cannot be reached: where the
   * address came from and how to change it (the CLI names KILN_BASE_URL).
   */
  unreachableHint?: string;
}

/** A typed client for Kiln's HTTP API; the CLI and `kiln mcp` use it, and so can anyone. */
/** A call's options: a submission's, and headers of the call's own (a save's preconditions). */
type CallOptions = SubmitOptions & { headers?: Record<string, string> };

export class KilnClient {
  readonly contexts: ContextsPort;
  readonly chat: {
    /** POST /v1/chat/completions, sync: the chat.completion (polling on if the gateway answers 202). */
    create(body: ChatRequest, options?: SubmitOptions): Promise<ChatCompletion>;
    /** POST /v1/chat/completions, stream: each chat.completion.chunk as it arrives, until [DONE]. */
    stream(body: ChatRequest, options?: SubmitOptions): AsyncGenerator<ChatChunk>;
    /** POST /v1/chat/completions, async: the 202 submission (id, polling_url). */
    submit(body: ChatRequest, options?: SubmitOptions): Promise<ChatSubmission>;
  };
  readonly jobs: {
    /** GET /v1/jobs/{id}: the poll body; id is a public id, a UUID or a polling_url. */
    get(id: string): Promise<Job>;
    /** Polls GET /v1/jobs/{id} until the job is terminal and answers it (completed or not). */
    wait(id: string, options?: WaitOptions): Promise<Job>;
    /** POST /v1/jobs/{id}/cancel: the cancelled job; 409 job-already-terminal if it had ended. */
    cancel(id: string): Promise<Job>;
    /** GET /v1/jobs: a page of the organisation's jobs, newest first. */
    list(query?: ListJobsQuery): Promise<JobList>;
  };
  readonly models: {
    /** GET /v1/models: personas and served models, with whether each is ready. */
    list(): Promise<{ object: 'list'; data: Model[] }>;
  };
  readonly videos: {
    /** POST /v1/videos/transitions: the 202 submission (id, polling_url, effective model and size). */
    transition(body: TransitionRequest, options?: SubmitOptions): Promise<VideoSubmission>;
    /** POST /v1/videos/generations: the 202 submission. */
    generate(body: VideoGenerationRequest, options?: SubmitOptions): Promise<VideoSubmission>;
  };
  readonly images: {
    /** POST /v1/images/generations with `mode: "async"`: the 202 submission. */
    generate(body: ImageRequest & { mode: 'async' }, options?: SubmitOptions): Promise<ImageSubmission>;
    /** POST /v1/images/generations, sync: the images (polling on if the gateway answers 202). */
    generate(body: ImageRequest & { mode?: 'sync' }, options?: SubmitOptions): Promise<ImagesResult>;
  };
  readonly files: {
    /**
     * Streams a file URL (a result's signed `url`, or a path under the gateway) to `path`. The API
     * key is sent only to this client's own base URL; a signed URL needs none.
     */
    download(url: string, path: string, options?: DownloadOptions): Promise<Downloaded>;
  };
  readonly #baseUrl: string;
  readonly #apiKey: string;
  readonly #fetch: typeof fetch;
  readonly #unreachableHint: string;
  /** Whether the gateway has answered this client yet: until it has, no answer means a wrong address. */
  #answered = false;

  constructor(options: ClientOptions) {
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#apiKey = options.apiKey;
    this.#fetch = options.fetch ?? fetch;
    this.#unreachableHint = options.unreachableHint ?? '';
    this.contexts = {
      save: async (body: SaveContextBody, precondition: SavePrecondition = {}) => {
        const headers: Record<string, string> = {};
        if (precondition.ifNoneMatch !== undefined) headers['if-none-match'] = precondition.ifNoneMatch;
        if (precondition.ifMatch !== undefined) headers['if-match'] = precondition.ifMatch;
        const { status, data } = await this.#call<ContextRecord>(
          ['context'],
          'POST',
          '/api/v1/contexts',
          body,
          {
            headers,
          },
        );
        return { context: data, created: status === 201 };
      },
      get: async (idOrName: string) =>
        (
          await this.#call<ContextWithContent>(
            ['context'],
            'GET',
            `/api/v1/contexts/${encodeURIComponent(idOrName)}`,
          )
        ).data,
      list: async (query: ListContextsQuery = {}) => {
        const search = new URLSearchParams();
        for (const [k, v] of Object.entries(query)) if (v !== undefined) search.set(k, String(v));
        const qs = search.size ? `?${search}` : '';
        return (await this.#call<ContextList>(['list'], 'GET', `/api/v1/contexts${qs}`)).data;
      },
      delete: async (idOrName: string, ifMatch?: string) =>
        (
          await this.#call<{ id: string; object: 'context'; deleted: true }>(
            ['context'],
            'DELETE',
            `/api/v1/contexts/${encodeURIComponent(idOrName)}`,
            undefined,
            ifMatch === undefined ? {} : { headers: { 'if-match': ifMatch } },
          )
        ).data,
    };

    const jobs: KilnClient['jobs'] = {
      get: async (id) => (await this.#call<Job>(['job'], 'GET', jobPath(id))).data,
      wait: async (id, options = {}) => {
        const interval = options.intervalMs ?? 1000;
        const deadline =
          options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
        const pause = (ms: number) => sleep(ms, undefined, options.signal ? { signal: options.signal } : {});
        // A poll only reads, so a failed one is safe to send again (a gateway restarting, a rolling upgrade).
        let failingSince: number | undefined;
        let retries = 0;
        let last: Job | undefined;
        let lastFailure: GatewayUnreachableError | KilnApiError | undefined;
        for (;;) {
          let job: Job;
          // A poll the gateway does not answer is cut at the deadline, not left to the fetch's own timeout.
          const cut = Number.isFinite(deadline)
            ? AbortSignal.timeout(Math.max(1, deadline - Date.now()))
            : undefined;
          const signal =
            cut && options.signal ? AbortSignal.any([cut, options.signal]) : (cut ?? options.signal);
          try {
            job = (await this.#call<Job>(['job'], 'GET', jobPath(id), undefined, signal ? { signal } : {}))
              .data;
          } catch (error) {
            if (cut?.aborted && !options.signal?.aborted) {
              // Cut in a run of failed polls: those failures are the news, as if this one had failed too.
              if (failingSince !== undefined && lastFailure)
                throw new JobPollError(id, lastFailure, Date.now() - failingSince);
              throw new JobWaitTimeoutError(last, options.timeoutMs ?? 0, last?.id ?? id);
            }
            // Until the gateway has answered this client (the submission that made the job counts),
            // no answer at all is more likely a wrong address than a restart.
            if (!isTransient(error) || !this.#answered) throw error;
            failingSince ??= Date.now();
            lastFailure = error;
            const giveUpAt = Math.min(failingSince + (options.retryMs ?? 60_000), deadline);
            const delay = Math.min(retryDelay(error, retries++), giveUpAt - Date.now());
            if (delay <= 0) throw new JobPollError(id, error, Date.now() - failingSince);
            options.onRetry?.(error, delay, retries);
            await pause(delay);
            continue;
          }
          failingSince = undefined;
          retries = 0;
          last = job;
          if (TERMINAL_STATUSES.includes(job.status)) return job;
          options.onProgress?.(job);
          const left = deadline - Date.now();
          if (left <= 0) throw new JobWaitTimeoutError(job, options.timeoutMs ?? 0);
          await pause(Math.min(interval, left));
        }
      },
      cancel: async (id) => (await this.#call<Job>(['job'], 'POST', `${jobPath(id)}/cancel`)).data,
      list: async (query = {}) => {
        const search = new URLSearchParams();
        for (const [k, v] of Object.entries(query)) if (v !== undefined) search.set(k, String(v));
        const qs = search.size ? `?${search}` : '';
        return (await this.#call<JobList>(['list'], 'GET', `/v1/jobs${qs}`)).data;
      },
    };
    this.jobs = jobs;

    const client = this;
    this.chat = {
      create: async (body, options = {}) => {
        const { mode: _mode, stream: _stream, ...rest } = body;
        const { status, data } = await this.#call<ChatCompletion | ChatSubmission>(
          ['chat.completion', 'chat.completion.async'],
          'POST',
          '/v1/chat/completions',
          rest,
          options,
        );
        if (status !== 202) return data as ChatCompletion;
        // The job outlasted the gateway's sync timeout; it goes on, so follow it.
        const job = await jobs.wait(
          (data as ChatSubmission).polling_url,
          options.signal ? { signal: options.signal } : {},
        );
        if (job.status !== 'completed') throw jobFailure(job);
        return job.result as ChatCompletion;
      },
      async *stream(body, options = {}) {
        const { mode: _mode, ...rest } = body;
        const response = await client.#send(
          'POST',
          '/v1/chat/completions',
          { ...rest, stream: true },
          options,
        );
        if (!response.ok || !response.body) await client.#fail(response, await response.text());
        // A gateway streams server-sent events; anything else came from something else at its address.
        if (!response.headers.get('content-type')?.startsWith('text/event-stream'))
          throw client.#notGateway(
            response,
            await response.text(),
            '/v1/chat/completions',
            'an event stream',
          );
        yield* chatChunks(
          response.body as ReadableStream<Uint8Array>,
          (status, error) => new KilnApiError(status, error),
        );
      },
      submit: async (body, options = {}) => {
        const { mode: _mode, stream: _stream, ...rest } = body;
        return (
          await this.#call<ChatSubmission>(
            ['chat.completion.async'],
            'POST',
            '/v1/chat/completions',
            { ...rest, mode: 'async' },
            options,
          )
        ).data;
      },
    };

    this.models = {
      // An engine answers /v1/models too, in OpenAI's shape: Kiln's list says each model's kind
      // and readiness, which tells a gateway from an engine's address given by mistake.
      list: async () =>
        (await this.#call<{ object: 'list'; data: Model[] }>(isModelList, 'GET', '/v1/models')).data,
    };

    this.videos = {
      transition: async (body, options = {}) =>
        (
          await this.#call<VideoSubmission>(
            ['video.transition'],
            'POST',
            '/v1/videos/transitions',
            body,
            options,
          )
        ).data,
      generate: async (body, options = {}) =>
        (
          await this.#call<VideoSubmission>(
            ['video.generation'],
            'POST',
            '/v1/videos/generations',
            body,
            options,
          )
        ).data,
    };

    const generateImages = async (
      body: ImageRequest,
      options: SubmitOptions = {},
    ): Promise<ImagesResult | ImageSubmission> => {
      const { status, data } = await this.#call<ImagesResult | ImageSubmission>(
        // A sync answer is OpenAI's images shape, which has no `object`.
        (answer) => answer.object === 'image.generation.async' || Array.isArray(answer.data),
        'POST',
        '/v1/images/generations',
        body,
        options,
      );
      if (status !== 202 || body.mode === 'async') return data;
      // The job outlasted the gateway's sync timeout; it goes on, so follow it.
      const job = await jobs.wait(
        (data as ImageSubmission).polling_url,
        options.signal ? { signal: options.signal } : {},
      );
      if (job.status !== 'completed') throw jobFailure(job);
      return job.result as ImagesResult;
    };
    this.images = { generate: generateImages as KilnClient['images']['generate'] };

    this.files = {
      download: async (url, file, options = {}) => {
        const target = new URL(url, `${this.#baseUrl}/`);
        const headers: Record<string, string> = {};
        if (this.#ownsUrl(target)) headers.authorization = `Bearer ${this.#apiKey}`;
        const response = await this.#request(target, {
          headers,
          ...(options.signal ? { signal: options.signal } : {}),
        });
        if (!response.ok) await this.#fail(response, await response.text());
        return saveBody(response, file, options);
      },
    };
  }

  /** A URL under this client's base URL (same origin, same path prefix): the only place the key goes. */
  #ownsUrl(url: URL): boolean {
    const base = new URL(`${this.#baseUrl}/`);
    return url.origin === base.origin && url.pathname.startsWith(base.pathname);
  }

  /** fetch, with "no answer at all" thrown as a GatewayUnreachableError naming the URL and what to check. */
  async #request(url: URL | string, init: RequestInit): Promise<Response> {
    try {
      const response = await this.#fetch(url, init);
      this.#answered = true;
      return response;
    } catch (error) {
      throw this.#explain(error, url);
    }
  }

  /** A failed fetch, or a body that stopped coming, in words that say where and what to check. */
  #explain(error: unknown, url: URL | string): unknown {
    let gateway = false;
    try {
      gateway = this.#ownsUrl(new URL(url, `${this.#baseUrl}/`));
    } catch {}
    const hint = gateway
      ? `Is the Kiln gateway (\`kiln serve\`) running at ${shownUrl(this.#baseUrl)}?${
          this.#unreachableHint ? ` ${this.#unreachableHint}` : ''
        }`
      : '';
    return explainFetchFailure(error, url, hint);
  }

  async #send(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...options.headers, authorization: `Bearer ${this.#apiKey}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey;
    return this.#request(`${this.#baseUrl}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /**
   * Throws the KilnApiError a non-2xx answer stands for: Kiln's envelope as it is, any other answer
   * (an engine's OpenAI-style error, a proxy's page) as `http-<status>` with the message it gave.
   */
  async #fail(response: Response, text: string): Promise<never> {
    const data = parseJson(text);
    const { error, ...attached } = (typeof data === 'object' && data !== null ? data : {}) as Record<
      string,
      unknown
    >;
    throw new KilnApiError(
      response.status,
      isErrorBody(error)
        ? error
        : {
            type: 'http_error',
            code: `http-${response.status}`,
            message: foreignMessage(data) ?? (text.slice(0, 200) || response.statusText),
          },
      response.url ? shownUrl(response.url) : undefined,
      retryAfterOf(response),
      isErrorBody(error) && Object.keys(attached).length > 0 ? attached : undefined,
    );
  }

  /**
   * One JSON call. `is` says what a gateway's answer must be (its `object`, or a test of it): an
   * object of another shape came from something else at that address (another service's JSON),
   * and must not pass for a result, printed as `undefined` fields.
   */
  async #call<T>(
    is: AnswerShape,
    method: string,
    path: string,
    body?: unknown,
    options: CallOptions = {},
  ): Promise<{ status: number; data: T }> {
    const response = await this.#send(method, path, body, options);
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      throw this.#explain(error, response.url || `${this.#baseUrl}${path}`);
    }
    if (!response.ok) await this.#fail(response, text);
    const data = parseJson(text);
    // Every JSON answer of the gateway is an object: anything else came from something else at
    // that address (a proxy's login page, another service), and must not pass for a result.
    if (data === null || typeof data !== 'object' || Array.isArray(data) || !fits(is, data)) {
      throw this.#notGateway(response, text, path, "a Kiln gateway's JSON");
    }
    return { status: response.status, data: data as T };
  }

  /** An answer that came from something else at the gateway's address: `invalid-answer`, sampled. */
  #notGateway(response: Response, text: string, path: string, expected: string): KilnApiError {
    const url = shownUrl(response.url || `${this.#baseUrl}${path}`);
    const type = response.headers.get('content-type')?.split(';')[0] ?? 'no content type';
    const sample = text.replace(/\s+/g, ' ').trim().slice(0, 80);
    const what = sample ? `${type} (${sample})` : 'an empty body';
    return new KilnApiError(
      response.status,
      {
        type: 'server_error',
        code: 'invalid-answer',
        message: `${url} answered ${response.status} with ${what}, not ${expected}`,
      },
      url,
    );
  }
}

const isModelList = (answer: Record<string, unknown>): boolean =>
  answer.object === 'list' &&
  Array.isArray(answer.data) &&
  answer.data.every(
    (m: Partial<Model> | null) => typeof m?.kind === 'string' && typeof m.ready === 'boolean',
  );

/** What an answer must be: one of these `object`s, or what a test says. */
type AnswerShape = readonly string[] | ((answer: Record<string, unknown>) => boolean);

const fits = (is: AnswerShape, answer: object): boolean =>
  typeof is === 'function'
    ? is(answer as Record<string, unknown>)
    : is.includes(String((answer as { object?: unknown }).object));

/** The JSON in `text`, or undefined when it is empty or not JSON. */
function parseJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Kiln's error envelope (`error` of an error answer): a string code and message, and `details`, if
 * any, a list of `{field, message}` strings.
 */
function isErrorBody(value: unknown): value is ErrorBody {
  const body = value as Partial<Record<keyof ErrorBody, unknown>> | null | undefined;
  const detail = (d: unknown) =>
    typeof (d as { field?: unknown })?.field === 'string' &&
    typeof (d as { message?: unknown })?.message === 'string';
  return (
    typeof body?.code === 'string' &&
    typeof body.message === 'string' &&
    (body.details === undefined || (Array.isArray(body.details) && body.details.every(detail)))
  );
}

/**
 * The message of an error answer in another shape: an OpenAI-compatible engine's
 * `{"error": {"message", "code": 404}}`, Fastify's `{"error": "Not Found", "message"}`.
 */
function foreignMessage(data: unknown): string | undefined {
  const { error, message } = (data ?? {}) as { error?: unknown; message?: unknown };
  const inner = (error as { message?: unknown } | null | undefined)?.message;
  return [inner, message, error].find((m): m is string => typeof m === 'string' && m !== '');
}

export { verifyWebhook } from './webhooks.js';
