import { inlineMessageImages } from '../chat/images.js';
import { type ChatDeps, chatThroughRouter, preamble, renameMessages, withDefaults } from '../chat/kind.js';
import { ledgerUnits } from '../chat/usage.js';
import type { ChatChunk, ChatMessage } from '../engines/types.js';
import { JobFailure, type JobKind } from '../jobs/kinds.js';
import { tokenMeter } from '../limits/meter.js';
import type { Store } from '../store/index.js';
import { ResponseEvents } from './events.js';
import { chatMessages } from './input.js';
import { outputIds } from './items.js';
import { ResponseLog } from './log.js';
import { opensQueued } from './opening.js';
import {
  endOf,
  outputItems,
  type ResponseState,
  responseError,
  responseObject,
  responseUsage,
} from './output.js';
import { createdAtOf, RESPONSE_PREFIX } from './present.js';
import type { Item, ResponseJobRequest } from './schema.js';
import { cut, truncating } from './truncation.js';

/** How far back `previous_response_id` is followed: beyond it, a conversation is refused, not cut. */
export const MAX_TURNS = 1000;

/**
 * The conversation a response continues, oldest first: each earlier response's input and output.
 * A response deleted since, or one of another organisation, ends the run with a clear failure.
 */
export async function conversation(store: Store, orgId: string, previous: string | null): Promise<Item[]> {
  const turns: Item[][] = [];
  for (let id = previous; id !== null; ) {
    if (turns.length >= MAX_TURNS) {
      throw new JobFailure('inference-failed', `the conversation is longer than ${MAX_TURNS} responses`);
    }
    const job = await store.jobs.get(orgId, id);
    if (job?.kind !== 'response' || job.result === null || (job.expires_at ?? Infinity) <= Date.now()) {
      throw new JobFailure(
        'inference-failed',
        `the previous response ${RESPONSE_PREFIX}${id} no longer exists`,
      );
    }
    const request = JSON.parse(job.request) as ResponseJobRequest;
    const result = JSON.parse(job.result) as { output: Item[] };
    turns.push([...request.input, ...result.output]);
    id = request.previous;
  }
  return turns.reverse().flat();
}

/**
 * The Responses API as a job kind: the request is translated to chat completions and served by the
 * router like any chat (personas, preambles, contexts, routing, usage); the answer is translated
 * back. A response asked to stream publishes its Responses events, numbered, as they happen.
 */
export function responseKind(deps: ChatDeps): JobKind<ResponseJobRequest> {
  return {
    name: 'response',
    idPrefix: RESPONSE_PREFIX,
    submissionObject: 'response',
    pollingBase: '/v1/jobs/',
    queueTtlMs: 10 * 60_000,
    runLimitMs: 30 * 60_000,
    // The turn's own input; earlier turns replayed by previous_response_id are settled from usage.
    meter: tokenMeter(
      (r) => [r.instructions, r.input],
      (r) => ({ max: r.chat.max_completion_tokens ?? r.chat.max_tokens ?? r.personaMaxTokens }),
      (r) => r.preambleChars ?? 0,
    ),
    async run(job, signal) {
      const { request } = job;
      const base = { id: job.publicId, model: request.model, createdAt: createdAtOf(job.id) };
      const response = (state: Partial<ResponseState>) =>
        responseObject({ ...base, status: 'in_progress', ...state }, request.echo);
      // A background stream keeps its events, so a client can resume it from any gateway; its
      // gateway sent its opening events already.
      const opened = opensQueued(request);
      const log = opened ? new ResponseLog(deps.store, job.id, job.attempt) : undefined;
      const events = request.echo.stream
        ? new ResponseEvents(
            (text, seq) => {
              job.publish(text);
              log?.add(seq, text);
            },
            outputIds(job.id),
            opened,
          )
        : undefined;
      const onChunk = (chunk: ChatChunk) => {
        if (!events) return;
        if (!events.started) events.start(response({}));
        events.chunk(chunk);
      };
      // An engine's refusal of a message is said of the input item it came from.
      let inputItem: (n: number) => string | undefined = () => undefined;
      try {
        const router = deps.router();
        const model = router.resolve(request.model);
        if (!model)
          throw new JobFailure('inference-failed', `no persona or served model named ${request.model}`);
        // Persona and contexts first, then the conversation so far: the prefix every turn shares.
        const before: ChatMessage[] = [
          ...(await preamble(deps.store, job.orgId, { ...request, includeUsage: false, body: {} }, router)),
          ...(request.instructions ? [{ role: 'system', content: request.instructions }] : []),
        ];
        const earlier = await conversation(deps.store, job.orgId, request.previous);
        const origins: number[] = [];
        const own = chatMessages([...earlier, ...request.input], origins);
        // The input item a message of `own` came from; undefined for an earlier turn's.
        const itemOf = (n: number) => {
          const item = (origins[n] ?? -1) - earlier.length;
          return item >= 0 ? `input[${item}]` : undefined;
        };
        const inlined = await inlineMessageImages(own, deps.images, signal).catch((failure: unknown) => {
          throw renameMessages(failure, itemOf);
        });
        const body = withDefaults(model.persona?.defaults, request.chat);
        let messages: ChatMessage[] = [];
        const { completion, route } = await truncating(
          request.echo.truncation === 'auto',
          inlined,
          (from) => {
            const { kept, origin } = cut(inlined, from);
            messages = [...before, ...kept];
            // The persona's, the contexts' and the instructions' messages are no input item.
            inputItem = (n: number) => (n < before.length ? undefined : itemOf(origin(n - before.length)));
            return chatThroughRouter(job, router, {
              model,
              messages,
              body,
              signal,
              org: job.orgId,
              ...(events ? { onChunk } : {}),
            });
          },
        );
        const choice = completion.choices[0];
        const end = endOf(choice?.finish_reason);
        let output: Item[];
        if (events) {
          if (!events.started) events.start(response({}));
          output = events.finish(end.status);
        } else output = outputItems(choice?.message, end.status, outputIds(job.id));
        const result = response({
          status: end.status,
          output,
          usage: responseUsage(completion.usage, route.cached_reported ?? 0),
          incomplete: end.incomplete,
          // Only a completed response has completed_at (OpenAI's Response: null otherwise).
          completedAt: end.status === 'completed' ? Math.floor(Date.now() / 1000) : null,
        });
        events?.end(end.status === 'completed' ? 'response.completed' : 'response.incomplete', result);
        // The whole log, the last event with it, is in the store before the job is terminal.
        await log?.close();
        return { result, usage: ledgerUnits(completion, messages) };
      } catch (caught) {
        const failure = renameMessages(caught, inputItem);
        // A stream that has begun ends with `response.failed`, as does a background one, whose
        // caller had its opening events; before any output another caller gets an HTTP error.
        if (events && (events.started || opened) && failure instanceof JobFailure && !signal.aborted) {
          // What was streamed before the failure stays in its output, its items closed `incomplete`.
          const output = events.close('incomplete');
          events.end(
            'response.failed',
            response({ status: 'failed', output, error: responseError(failure.code, failure.message) }),
          );
        }
        // The run's own failure is what the job reports, even if its log cannot be written either.
        await log?.close().catch(() => undefined);
        throw failure;
      }
    },
  };
}
