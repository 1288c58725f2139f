import type { ChatChunk, ChatMessage } from '../engines/types.js';
import { JobFailure, type JobKind } from '../jobs/kinds.js';
import { EngineError, type Router } from '../router/index.js';
import type { Store } from '../store/index.js';
import type { ChatJobRequest } from './schema.js';

export interface ChatDeps {
  /** The router in force: a reload swaps it between requests. */
  router(): Router;
  store: Store;
}

/** Persona preamble, then contexts (persona's, then the request's), then the caller's messages. */
async function preamble(
  store: Store,
  orgId: string,
  request: ChatJobRequest,
  router: Router,
): Promise<ChatMessage[]> {
  const persona = router.resolve(request.model)?.persona;
  const messages: ChatMessage[] = [];
  if (persona?.system) messages.push({ role: 'system', content: persona.system });
  for (const name of new Set([...(persona?.contexts ?? []), ...request.contexts])) {
    const context = await store.contexts.get(orgId, name);
    if (!context)
      throw new JobFailure('inference-failed', `context '${name}' no longer exists in this organisation`);
    messages.push({ role: 'system', content: context.content });
  }
  return messages;
}

/**
 * The engine's failure, as the job's: its 4xx is the caller's error (`engine-rejected`, with the
 * engine's own fields), timeouts end `timeout`, a fleet that is down `engine-unavailable`.
 */
function asJobFailure(error: EngineError): JobFailure {
  if (error.kind === 'rejected' && error.status !== undefined && error.status < 500) {
    return new JobFailure('engine-rejected', error.message, {
      engine_error: { status: error.status, ...error.engineFields },
    });
  }
  if (error.kind === 'timeout') return new JobFailure('engine-timeout', error.message, {}, 'timeout');
  // Nobody to ask (no replica up, connections refused, 503/429): the fleet is unavailable, not the answer wrong.
  if (
    error.kind === 'unavailable' &&
    (error.status === undefined || error.status === 503 || error.status === 429)
  ) {
    return new JobFailure('engine-unavailable', error.message);
  }
  return new JobFailure('inference-failed', error.message);
}

/**
 * What a stream's caller sees of the engine's chunks. Kiln always asks engines for the usage chunk;
 * a caller that did not ask gets none, and the usage chunk's `timings` (llama.cpp) move onto the
 * chunk with the finish reason, where llama.cpp puts them for such a caller.
 */
class ChunkRelay {
  #held: ChatChunk | undefined;

  constructor(
    private readonly includeUsage: boolean,
    private readonly send: (chunk: ChatChunk) => void,
  ) {}

  add(chunk: ChatChunk): void {
    const usageOnly = chunk.choices.length === 0;
    if (usageOnly && !this.includeUsage) {
      if (this.#held && chunk.timings !== undefined) this.#held = { ...this.#held, timings: chunk.timings };
      return;
    }
    this.end();
    // The finish chunk waits for the usage chunk that follows it.
    if (!this.includeUsage && chunk.choices.some((c) => c.finish_reason)) this.#held = chunk;
    else this.send(chunk);
  }

  end(): void {
    if (this.#held) this.send(this.#held);
    this.#held = undefined;
  }
}

/** Chat completions as a job kind: every mode runs here, through the router. */
export function chatKind(deps: ChatDeps): JobKind<ChatJobRequest> {
  return {
    name: 'chat',
    idPrefix: 'chatcmpl-',
    submissionObject: 'chat.completion.async',
    pollingBase: '/api/v1/jobs/',
    queueTtlMs: 10 * 60_000,
    runLimitMs: 30 * 60_000,
    async run(job, signal) {
      const router = deps.router();
      const model = router.resolve(job.request.model);
      if (!model)
        throw new JobFailure('inference-failed', `no persona or served model named ${job.request.model}`);
      const messages = [
        ...(await preamble(deps.store, job.orgId, job.request, router)),
        ...(job.request.body.messages as ChatMessage[]),
      ];
      const body = { ...(model.persona?.defaults ?? {}), ...job.request.body };
      delete body.messages;
      const created = Math.floor(Date.now() / 1000);
      const rename = <T extends { id: string; model: string; created: number }>(o: T): T => ({
        ...o,
        id: job.publicId,
        model: job.request.model,
        created,
      });
      const relay = new ChunkRelay(job.request.includeUsage, (chunk) => void job.publish(rename(chunk)));
      try {
        const { completion, route } = await router.chat({
          model,
          messages,
          body,
          signal,
          onRoute: (route) => void job.record({ route }),
          ...(job.mode === 'stream' ? { onChunk: (chunk: ChatChunk) => relay.add(chunk) } : {}),
        });
        relay.end();
        // The route again, now with the cached tokens the engine reported.
        if (route.cached_reported !== undefined) await job.record({ route });
        const usage = completion.usage;
        return {
          result: rename(completion),
          usage: usage
            ? { inputUnits: usage.prompt_tokens, outputUnits: usage.completion_tokens }
            : undefined,
        };
      } catch (error) {
        if (error instanceof EngineError) throw asJobFailure(error);
        throw error;
      }
    },
  };
}
