import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { KilnError } from '../errors.js';
import { uuidv7 } from '../ids.js';
import type { JobEvent } from '../jobs/events.js';
import type { JobKind } from '../jobs/kinds.js';
import type { Webhook } from '../jobs/schemas.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import { rateHeaders } from '../limits/refusal.js';
import type { JobRow } from '../store/types.js';
import { whenClientGoes } from './gone.js';
import { idempotencyKeyOf, jobError, stillRunning } from './submit.js';

/** How long a stream whose job the store shows ended still waits for that job's last events. */
const LOST_DONE_GRACE_MS = 2000;

/**
 * The headers of every server-sent event stream Kiln answers. No `connection` header: Node's own
 * follows the client's (a client that asked for `close`, or an HTTP/1.0 one, has it closed).
 */
export const EVENT_STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
} as const;

/**
 * Calls `ended` with the job's row once a read of the store, every `everyMs`, finds it terminal, and
 * `graceMs` after that read: the safety net for a done event lost between processes. Answers the
 * function that stops watching. Each read is of the status alone, and the row is read once it is
 * over: streams started together read together, and a row carries the job's request. 256 rows with
 * 100 KB prompts read together held the event loop 22–28 ms on SQLite; their statuses, 0.7 ms.
 */
export function watchForEnd(
  jobs: JobService,
  id: string,
  everyMs: number,
  graceMs: number,
  ended: (job: JobRow) => void,
): () => void {
  let stopped = false;
  let reading = false;
  const read = async () => {
    const status = await jobs.store.jobs.statusOf(id);
    if (stopped || status === undefined || !isTerminal(status)) return;
    const job = await jobs.store.jobs.byId(id);
    if (stopped || !job) return;
    clearInterval(timer);
    timer = setTimeout(() => ended(job), graceMs);
  };
  let timer: NodeJS.Timeout | undefined = setInterval(() => {
    if (reading) return;
    reading = true;
    read()
      .catch(() => undefined)
      .finally(() => {
        reading = false;
      });
  }, everyMs);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

export interface StreamOptions {
  kind: JobKind;
  request: unknown;
  /** Response headers derived from what the job recorded before its first output (the route). */
  headers?: (meta: Record<string, unknown>) => Record<string, string>;
  /** How parts and the end are framed; chat completions' `data:` lines and `[DONE]` by default. */
  format?: () => StreamFormat;
  /**
   * `async` for a job that outlives its stream (a background response): any worker may take it, and
   * a client that goes away leaves it running. A `stream` job is cancelled with its client.
   */
  mode?: 'stream' | 'async';
  webhook?: Webhook | undefined;
  /** The body as sent, where `request` adds Kiln's own facts: what an Idempotency-Key binds. */
  sent?: unknown;
  /** `streams.max_unsent_bytes`: a client this far behind is cut off (EventWriter). */
  maxUnsentBytes: number;
  /**
   * The whole event stream again for a completed job, answering a retry with its Idempotency-Key
   * (the same body as the first): given, the key is honoured; without it, a stream ignores the key.
   */
  replay?: (job: JobRow) => string;
  /**
   * Events the stream opens with the moment its job is stored, given the job's id (a background
   * response's `response.created`): the headers go with them, without waiting for the first output,
   * and a job that fails before any ends the stream as one that fails later does.
   */
  opening?: (id: string) => string;
}

const RUN_LOST =
  'the process running this stream stopped after the answer began; a stream cannot take up the answer of the run that replaces it: send the request again';

/** How a stream frames its job's parts, and what it writes once the job is over. */
export interface StreamFormat {
  part(data: string): string;
  /** `error` is set when the job did not complete. */
  end(job: JobRow, error: KilnError | undefined): string;
}

/** Chat completions: each part is a chunk's JSON on a `data:` line; the end is `[DONE]` or an error event. */
const chatFormat: StreamFormat = {
  part: (data) => `data: ${data}\n\n`,
  end: (_job, error) =>
    error ? `data: ${JSON.stringify({ error: error.toBody() })}\n\n` : 'data: [DONE]\n\n',
};

/**
 * `mode: "stream"`: the job publishes its chunks and this request relays each one as a server-sent
 * event the moment it arrives, then `data: [DONE]`. A failure before any output is an ordinary HTTP
 * error; after it, an `error` event. A client that goes away cancels the job, which aborts the engine call.
 */
export async function streamJob(
  request: FastifyRequest,
  reply: FastifyReply,
  jobs: JobService,
  options: StreamOptions,
) {
  const id = uuidv7();
  const mode = options.mode ?? 'stream';
  const format = options.format?.() ?? chatFormat;
  const pending: JobEvent[] = [];
  let deliver: (event: JobEvent) => void = (event) => pending.push(event);
  const off = jobs.events.on(id, (event) => deliver(event));
  let finished = false;
  let stopWatching: () => void = () => undefined;
  let stopWatchingClient: () => void = () => undefined;
  try {
    const {
      job: submitted,
      windows,
      replayed,
    } = await jobs.submit({
      id,
      kind: options.kind,
      mode,
      caller: request.auth,
      request: options.request,
      sent: options.sent,
      webhook: options.webhook,
      idempotencyKey: options.replay ? idempotencyKeyOf(request) : undefined,
    });
    // The caller's limits as they stand, on an early error's answer too.
    const limitHeaders = windows ? rateHeaders(windows) : {};
    reply.headers(limitHeaders);
    if (replayed) return replay(reply, jobs, submitted, options);
    // A done event lost between processes still ends the stream: the store is read now and then.
    // The job's last chunks and its done event travel together after its end is committed, so a
    // stream that finds its job over in the store waits a little longer for them first.
    stopWatching = watchForEnd(jobs, id, jobs.rereadMs(submitted), LOST_DONE_GRACE_MS, (job) =>
      deliver({ t: 'done', id, job }),
    );
    // A client that goes away at any moment — before the first token too — cancels the job, and
    // with it the engine's generation. One that left while the job was being recorded closed
    // before there was a listener.
    const gone = () => {
      if (mode === 'stream' && !finished && !reply.raw.writableFinished)
        void jobs.abandon(request.auth.org_id, id).catch(() => undefined);
    };
    stopWatchingClient = whenClientGoes(request, reply, gone);
    // Wait for the first output (or the end): a failure before any token is still an ordinary HTTP
    // error, and the route in the headers is the one that produced the output, after any retries.
    // A stream with opening events has its headers now, without a route.
    const failed = options.opening
      ? undefined
      : await firstOutput(jobs, id, pending, (wait) => {
          deliver = wait;
        });
    if (failed) {
      finished = true;
      throw failed;
    }

    const meta = pending.findLast((e): e is Extract<JobEvent, { t: 'meta' }> => e.t === 'meta')?.meta ?? {};
    reply.hijack();
    const raw = reply.raw;
    raw.writeHead(200, {
      ...EVENT_STREAM_HEADERS,
      'x-request-id': request.id,
      ...limitHeaders,
      ...(options.headers?.(meta) ?? {}),
    });

    const out = new EventWriter(raw, request, options.maxUnsentBytes);
    if (options.opening) out.write(format.part(options.opening(id)));
    await new Promise<void>((resolve) => {
      let ending = false;
      /** The run whose output this stream relays: the first to send any. */
      let run: number | undefined;
      const write = (event: JobEvent) => {
        if (ending) return;
        if (event.t === 'part') {
          if (run !== undefined && event.a !== run) {
            // The process running the job stopped after its output began, and another runs it
            // again: its answer would start over mid-stream. The stream ends as a failure does.
            ending = true;
            finished = true;
            if (mode === 'stream')
              void jobs.abandon(request.auth.org_id, id, RUN_LOST).catch(() => undefined);
            out.write(format.end(submitted, new KilnError('worker-lost', RUN_LOST)));
            out.end();
            resolve();
            return;
          }
          run = event.a;
          out.write(format.part(event.data));
        }
        if (event.t !== 'done') return;
        ending = true;
        void (event.job ? Promise.resolve(event.job) : jobs.store.jobs.byId(id)).then((job) => {
          finished = true;
          if (job)
            out.write(
              format.end(job, job.status === 'completed' ? undefined : jobError(job, jobs.poll(job))),
            );
          out.end();
          resolve();
        });
      };
      deliver = write;
      for (const event of pending.splice(0)) write(event);
      raw.on('close', () => resolve());
    });
  } finally {
    stopWatching();
    stopWatchingClient();
    off();
  }
}

/**
 * Resolves once the job's first output (or its end) is among `pending`, with the job's error when it
 * ended without completing. `listen` is given what to do with each event heard meanwhile.
 */
async function firstOutput(
  jobs: JobService,
  id: string,
  pending: JobEvent[],
  listen: (deliver: (event: JobEvent) => void) => void,
): Promise<KilnError | undefined> {
  const first = await new Promise<JobEvent>((resolve) => {
    const isStart = (event: JobEvent) => event.t === 'part' || event.t === 'done';
    const ready = pending.find(isStart);
    if (ready) return resolve(ready);
    listen((event) => {
      pending.push(event);
      if (isStart(event)) resolve(event);
    });
  });
  if (first.t !== 'done') return undefined;
  const job = first.job ?? ((await jobs.store.jobs.byId(id)) as JobRow);
  return job.status === 'completed' ? undefined : jobError(job, jobs.poll(job));
}

/**
 * The answer to a stream's retry with the Idempotency-Key of an earlier one: its job's whole stream
 * once it completed, the error it ended with, or 409 while it still runs (its events so far are
 * not kept to be sent again; its polling URL gives the result once it is over).
 */
function replay(reply: FastifyReply, jobs: JobService, job: JobRow, options: StreamOptions) {
  reply.header('idempotent-replayed', 'true');
  if (!isTerminal(job.status)) {
    throw stillRunning(options.kind, job, 'stream');
  }
  if (job.status !== 'completed') throw jobError(job, jobs.poll(job));
  const meta = job.meta ? (JSON.parse(job.meta) as Record<string, unknown>) : {};
  return reply
    .status(200)
    .headers({ ...EVENT_STREAM_HEADERS, ...(options.headers?.(meta) ?? {}) })
    .send((options.replay as (job: JobRow) => string)(job));
}

/**
 * Server-sent events written straight onto the response's socket, each batch framed as one HTTP/1.1
 * chunk: one write per event, or one for the events that arrived in the same read (they are joined
 * until the current task ends). Node's `res.write` would buffer four writes per event and send them
 * on the next tick; it sends only the first batch, with the headers. A response that is not chunked
 * (an HTTP/1.0 client) goes through `res.write` throughout. The last batch goes with `res.end`.
 *
 * Events are not held back for a client that reads slowly: an engine generates at its own pace, and
 * waiting would hold its slot. What the kernel will not take waits in the process instead, and a
 * client that stops reading would have it grow for as long as the generation runs. Once more than
 * `maxUnsentBytes` wait, the connection is closed, as if the client had gone: a `stream` job is
 * cancelled with it, and a background one runs on (its events can be read again from the log).
 */
export class EventWriter {
  #pending = '';
  /** The first batch goes through `res.write`, which sends the headers with it in one write. */
  #headersSent = false;
  readonly #direct: boolean;
  readonly #flush = () => {
    const text = this.#pending;
    this.#pending = '';
    const socket = this.raw.socket;
    if (text === '') return;
    if (!socket) {
      // A pipelined request's answer waits for the answer before it on the connection; Node keeps
      // what is written meanwhile and sends it then.
      if (this.raw.destroyed || this.raw.writableEnded) return;
      this.raw.write(text);
      if (this.raw.writableLength > this.maxUnsentBytes) this.raw.destroy();
      return;
    }
    if (socket.destroyed) return;
    if (this.#direct && this.#headersSent)
      socket.write(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`);
    else this.raw.write(text);
    this.#headersSent = true;
    const unsent = socket.writableLength;
    if (unsent > this.maxUnsentBytes) {
      this.request.log.warn(
        { unsent_bytes: unsent, max_unsent_bytes: this.maxUnsentBytes },
        'stream closed: its client stopped reading',
      );
      socket.destroy();
    }
  };

  /** `raw` has had its `writeHead`, which decides whether the body is chunked. */
  constructor(
    private readonly raw: ServerResponse,
    /** The request answered, for its log. */
    private readonly request: Pick<FastifyRequest, 'log'>,
    private readonly maxUnsentBytes: number,
  ) {
    this.#direct = (raw as ServerResponse & { chunkedEncoding?: boolean }).chunkedEncoding === true;
  }

  /** Whole events, framed. */
  write(text: string): void {
    if (text === '') return;
    if (this.#pending === '') queueMicrotask(this.#flush);
    this.#pending += text;
  }

  /**
   * Resolves once the client has taken what this wrote, when more than the socket's high-water mark
   * waited beyond the kernel's buffers, or once it is gone: for a writer that sets its own pace,
   * such as a log read back page by page, which must not be cut off for outrunning its client.
   */
  async drained(): Promise<void> {
    // The batch written last goes in a microtask queued before this one.
    await null;
    const socket = this.raw.socket;
    // 'drain' comes only after a write the buffer refused (past its high-water mark).
    if (!socket || socket.destroyed || !socket.writableNeedDrain) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        socket.off('drain', done);
        socket.off('close', done);
        resolve();
      };
      socket.on('drain', done);
      socket.on('close', done);
    });
  }

  /**
   * Writes what is waiting and the end of the response. Node corks the socket for `end`, so the last
   * events and the body's terminating chunk leave in one write.
   */
  end(): void {
    const text = this.#pending;
    this.#pending = '';
    if (text === '') this.raw.end();
    else this.raw.end(text);
  }
}
