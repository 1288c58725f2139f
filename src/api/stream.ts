import type { FastifyReply, FastifyRequest } from 'fastify';
import { uuidv7 } from '../ids.js';
import type { JobEvent } from '../jobs/events.js';
import type { JobKind } from '../jobs/kinds.js';
import { isTerminal, type JobService } from '../jobs/service.js';
import type { JobRow } from '../store/types.js';
import { jobError } from './submit.js';

export interface StreamOptions {
  kind: JobKind;
  request: unknown;
  /** Response headers derived from what the job recorded before its first output (the route). */
  headers?: (meta: Record<string, unknown>) => Record<string, string>;
}

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
  const pending: JobEvent[] = [];
  let deliver: (event: JobEvent) => void = (event) => pending.push(event);
  const off = jobs.events.on(id, (event) => deliver(event));
  let finished = false;
  try {
    await jobs.submit({
      id,
      kind: options.kind,
      mode: 'stream',
      orgId: request.auth.org_id,
      keyId: request.auth.id,
      request: options.request,
    });
    // A client that goes away at any moment — before the first token too — cancels the job, and
    // with it the engine's generation.
    reply.raw.once('close', () => {
      if (!finished && !reply.raw.writableFinished)
        void jobs.cancel(request.auth.org_id, id).catch(() => undefined);
    });
    // Wait for the first output (or the end): a failure before any token is still an ordinary HTTP
    // error, and the route in the headers is the one that produced the output, after any retries.
    const first = await new Promise<JobEvent>((resolve) => {
      const isStart = (event: JobEvent) => event.t === 'part' || event.t === 'done';
      const ready = pending.find(isStart);
      if (ready) return resolve(ready);
      deliver = (event) => {
        pending.push(event);
        if (isStart(event)) resolve(event);
      };
    });
    if (first.t === 'done') {
      const job = first.job ?? ((await jobs.store.jobs.byId(id)) as JobRow);
      if (job.status !== 'completed') {
        finished = true;
        throw jobError(job, jobs.poll(job));
      }
    }

    const meta = pending.findLast((e): e is Extract<JobEvent, { t: 'meta' }> => e.t === 'meta')?.meta ?? {};
    reply.hijack();
    const raw = reply.raw;
    raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-request-id': request.id,
      ...(options.headers?.(meta) ?? {}),
    });

    await new Promise<void>((resolve) => {
      const write = (event: JobEvent) => {
        if (event.t === 'part') raw.write(`data: ${JSON.stringify(event.data)}\n\n`);
        if (event.t !== 'done') return;
        void (event.job ? Promise.resolve(event.job) : jobs.store.jobs.byId(id)).then((job) => {
          finished = true;
          if (job?.status === 'completed') raw.write('data: [DONE]\n\n');
          else if (job)
            raw.write(`data: ${JSON.stringify({ error: jobError(job, jobs.poll(job)).toBody() })}\n\n`);
          raw.end();
          resolve();
        });
      };
      deliver = write;
      for (const event of pending.splice(0)) write(event);
      // A done event lost between processes still ends the stream.
      void jobs.waitForTerminal(id, 24 * 60 * 60 * 1000).then((job) => {
        if (!finished && isTerminal(job.status)) write({ t: 'done', id });
      });
      raw.on('close', () => resolve());
    });
  } finally {
    off();
  }
}
