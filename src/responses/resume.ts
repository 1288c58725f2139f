import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { EVENT_STREAM_HEADERS, EventWriter, watchForEnd } from '../api/stream.js';
import { jobError } from '../api/submit.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import type { JobRow, ResponseEvent } from '../store/index.js';
import { responsesFormat, sequenceOf } from './events.js';

/** Events one read of the log takes at most. */
const PAGE = 500;
/** The first wait for events the writer has published but not stored yet; it doubles up to GAP_MAX_MS. */
const GAP_FIRST_MS = 25;
const GAP_MAX_MS = 1000;
/**
 * How long after a cancel the log is read for the last time: the run stores the events it published
 * before the cancel as it stops, which takes it a moment (ResponseLog waits up to 50 ms to batch).
 */
const CANCELLED_LOG_MS = 500;

/**
 * `GET /v1/responses/{id}?stream=true&starting_after=N`: a background streaming response's events
 * after N, from its log in the store, then live as they happen, then the stream's end — from any
 * gateway, while the response runs or after. The client sees each event once, in order.
 *
 * It listens to the job's events before it reads anything, so whatever happens after the read is
 * heard. A heard event that does not follow the last one written means the writer has not stored
 * the ones between yet (it batches): they are read from the log once there. Once the job is terminal
 * its log is whole (the run stores it before it ends; a cancelled run, what it had published, as it
 * stops), and the rest comes from there.
 */
export async function resumeStream(
  request: FastifyRequest,
  reply: FastifyReply,
  jobs: JobService,
  id: string,
  startingAfter: number,
  /** The stream's opening events, which the log does not hold (opening.ts). */
  opening: readonly ResponseEvent[],
  maxUnsentBytes: number,
  /** Written with the head: the caller's `x-ratelimit-*`, which the onSend hook cannot add here. */
  headers: Record<string, string> = {},
): Promise<void> {
  const heard = new Heard(jobs, id, reply.raw);
  try {
    await heard.start();
    reply.hijack();
    try {
      await relay(reply.raw, request, jobs, id, startingAfter, opening, heard, maxUnsentBytes, headers);
    } catch (error) {
      // Past the headers there is no status to answer: the client sees the stream cut, and resumes.
      request.log.error({ err: error, job_id: id }, 'resuming a response stream failed');
      reply.raw.destroy();
    }
  } finally {
    heard.stop();
  }
}

/** What a stream hears while it relays: the job's live events not written yet, its end, its client leaving. */
class Heard {
  readonly live: ResponseEvent[] = [];
  /** The job once it is known to be terminal; `true` when only a done event from elsewhere said so. */
  over: JobRow | true | undefined;
  closed = false;
  #wake: () => void = () => undefined;
  readonly #off: () => void;
  #stopWatching: () => void = () => undefined;

  constructor(
    private readonly jobs: JobService,
    private readonly id: string,
    raw: ServerResponse,
  ) {
    this.#off = jobs.events.on(id, (event) => {
      if (event.t === 'part') this.live.push({ seq: sequenceOf(event.data), data: event.data });
      else if (event.t === 'done') this.over ??= event.job ?? true;
      else return;
      this.#wake();
    });
    raw.once('close', () => {
      this.closed = true;
      this.#wake();
    });
  }

  /** Reads the job, now that its events are heard: a job over already, or watched for a lost end. */
  async start(): Promise<void> {
    const job = await this.jobs.store.jobs.byId(this.id);
    if (job && isTerminal(job.status)) this.over ??= job;
    else {
      this.#stopWatching = watchForEnd(this.jobs, this.id, this.jobs.rereadMs(job), 0, (ended) => {
        this.over ??= ended;
        this.#wake();
      });
    }
  }

  /** Resolves when something more is heard. */
  next(): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve;
    });
  }

  stop(): void {
    this.#stopWatching();
    this.#off();
  }
}

async function relay(
  raw: ServerResponse,
  request: FastifyRequest,
  jobs: JobService,
  id: string,
  startingAfter: number,
  opening: readonly ResponseEvent[],
  heard: Heard,
  maxUnsentBytes: number,
  headers: Record<string, string>,
): Promise<void> {
  const { store } = jobs;
  raw.writeHead(200, { ...EVENT_STREAM_HEADERS, 'x-request-id': request.id, ...headers });
  const out = new EventWriter(raw, request, maxUnsentBytes);
  const format = responsesFormat(startingAfter);
  let last = startingAfter;
  const write = (event: ResponseEvent) => {
    out.write(format.part(event.data));
    last = event.seq;
  };
  /** Writes the log's events after the last written: those that follow on, or all once the job is over. */
  const fromLog = async (whole: boolean) => {
    for (;;) {
      const page = await store.responseEvents.after(id, last, PAGE);
      for (const event of page) {
        if (!whole && event.seq !== last + 1) return;
        write(event);
      }
      // At the client's pace: a long log is read back faster than any client reads it.
      await out.drained();
      if (page.length < PAGE || heard.closed) return;
    }
  };

  for (const event of opening) if (event.seq > last) write(event);
  await fromLog(false);
  // Nothing to send yet (a queued job, or one between events): the client still gets its headers.
  if (last === startingAfter) raw.flushHeaders();
  const { live } = heard;
  let gapMs = GAP_FIRST_MS;
  while (!heard.closed) {
    if (heard.over) {
      const job = heard.over === true ? ((await store.jobs.byId(id)) as JobRow) : heard.over;
      if (job.status === 'cancelled') await sleep((job.finished_at ?? 0) + CANCELLED_LOG_MS - Date.now());
      await fromLog(true);
      if (last === startingAfter) {
        // The client has every event the log holds: the end is none after a terminal one. (Should a
        // cancelled run's last events have reached clients live and never the log, its process gone
        // before it stored them, the end is numbered after what the client says it has.)
        const previous = await store.responseEvents.last(id);
        if (previous) format.seen(previous.data);
      }
      out.write(format.end(job, job.status === 'completed' ? undefined : jobError(job, jobs.poll(job))));
      out.end();
      return;
    }
    while (live.length > 0 && (live[0] as ResponseEvent).seq <= last + 1) {
      const event = live.shift() as ResponseEvent;
      if (event.seq === last + 1) write(event);
    }
    if (live.length === 0) {
      await heard.next();
      continue;
    }
    // A gap: the events between are published but not stored yet.
    await fromLog(false);
    if ((live[0] as ResponseEvent).seq > last + 1) {
      await sleep(gapMs);
      gapMs = Math.min(GAP_MAX_MS, gapMs * 2);
    } else gapMs = GAP_FIRST_MS;
  }
}
