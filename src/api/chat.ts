import type { FastifyInstance } from 'fastify';
import { checkMessageImages } from '../chat/images.js';
import { chatReplay } from '../chat/replay.js';
import { ChatBody, type ChatJobRequest } from '../chat/schema.js';
import { parseDuration } from '../config/schema.js';
import type { ChatMessage } from '../engines/types.js';
import { KilnError, validationError } from '../errors.js';
import type { JobKind } from '../jobs/kinds.js';
import { type Route, routeHeader } from '../router/index.js';
import type { JobRow } from '../store/types.js';
import type { AppDeps } from './app.js';
import { inlineImagesBodyLimit } from './media.js';
import { streamJob } from './stream.js';
import { boundRequest, submitJob } from './submit.js';

/** The `x-kiln-route` header, from what the job recorded (its meta). */
export const routeOf = (meta: Record<string, unknown>): Record<string, string> => {
  const route = meta.route as Route | undefined;
  return route ? { 'x-kiln-route': routeHeader(route) } : {};
};

/** What a token budget's reservation counts beside the caller's request. */
export interface Preamble {
  /** Characters (bytes, at most) the persona's preamble and the contexts put before the messages. */
  preambleChars: number;
  /** The persona's default output limit, which the engine gets when the caller sets none. */
  personaMaxTokens?: number;
}

/**
 * A persona or served model that exists, and every context it and the request name, in this
 * organisation: checked before any job exists (404 `model-not-found`, 400 naming each context).
 * Answers what the persona and those contexts add to the caller's request.
 */
export async function checkModelAndContexts(
  deps: AppDeps,
  orgId: string,
  model: string,
  contexts: readonly string[],
): Promise<Preamble> {
  const resolved = deps.runtime.router().resolve(model);
  if (!resolved) {
    throw new KilnError(
      'model-not-found',
      `no persona or served model named '${model}'; GET /v1/models lists them`,
      {
        param: 'model',
      },
    );
  }
  const wanted = [...new Set([...(resolved.persona?.contexts ?? []), ...contexts])];
  const sizes = await deps.store.contexts.sizes(orgId, wanted);
  const missing = wanted.filter((name) => !sizes.has(name));
  if (missing.length > 0) {
    throw validationError(
      missing.map((name) => ({
        field: contexts.includes(name) ? `contexts[${contexts.indexOf(name)}]` : 'model',
        rule: 'exists',
        message: `no context named '${name}' in this organisation`,
        received: name,
      })),
    );
  }
  let chars = resolved.persona?.system?.length ?? 0;
  for (const size of sizes.values()) chars += size;
  const defaults = resolved.persona?.defaults;
  const max = defaults?.max_completion_tokens ?? defaults?.max_tokens;
  return typeof max === 'number' ? { preambleChars: chars, personaMaxTokens: max } : { preambleChars: chars };
}

/** POST /v1/chat/completions in sync (default), stream and async modes, all through the chat job kind. */
export function chatRoutes(app: FastifyInstance, deps: AppDeps): void {
  const kind = deps.jobs.kinds.get('chat') as JobKind;
  const syncTimeoutMs = parseDuration(deps.config.jobs.sync_timeout);

  app.post<{ Body: ChatBody }>(
    '/v1/chat/completions',
    // Images may come inline (`data:` URIs) up to files.max_input_bytes each, as media inputs do.
    { schema: { body: ChatBody }, bodyLimit: inlineImagesBodyLimit(deps.config.files.max_input_bytes) },
    async (request, reply) => {
      const { model, mode: asked, stream, stream_options, webhook, contexts = [], ...rest } = request.body;
      if (stream === true && asked !== undefined && asked !== 'stream') {
        throw validationError([
          {
            field: 'stream',
            rule: 'conflict',
            message: `stream: true means mode "stream"; it cannot go with mode "${asked}"`,
          },
        ]);
      }
      const mode = asked ?? (stream ? 'stream' : 'sync');
      // As OpenAI and vLLM answer it: options for a stream on a request that does not stream.
      if (stream_options != null && mode !== 'stream') {
        throw validationError([
          {
            field: 'stream_options',
            rule: 'mode',
            message: 'stream_options apply to a stream: they need stream: true or mode "stream"',
          },
        ]);
      }
      const preamble = await checkModelAndContexts(deps, request.auth.org_id, model, contexts);
      await checkMessageImages(rest.messages as ChatMessage[], deps.policy);
      const job: ChatJobRequest = {
        model,
        contexts,
        includeUsage: stream_options?.include_usage === true,
        body: rest,
        ...preamble,
      };
      if (mode === 'stream') {
        if (webhook) {
          throw validationError([
            {
              field: 'webhook',
              rule: 'mode',
              message: 'a stream is answered as it runs; webhooks need mode "async" or "sync"',
            },
          ]);
        }
        return streamJob(request, reply, deps.jobs, {
          kind,
          request: job,
          sent: boundRequest(job),
          headers: routeOf,
          maxUnsentBytes: deps.config.streams.max_unsent_bytes,
          replay: chatReplay,
        });
      }
      return submitJob(
        request,
        reply,
        { jobs: deps.jobs, policy: deps.policy, syncTimeoutMs },
        {
          kind,
          mode,
          request: job,
          sent: boundRequest(job),
          webhook,
          headers: (row: JobRow) =>
            routeOf(row.meta ? (JSON.parse(row.meta) as Record<string, unknown>) : {}),
        },
      );
    },
  );
}
