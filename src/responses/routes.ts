import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../api/app.js';
import { checkModelAndContexts, routeOf } from '../api/chat.js';
import { inlineImagesBodyLimit } from '../api/media.js';
import { streamJob } from '../api/stream.js';
import { boundRequest, checkWebhook, submitJob } from '../api/submit.js';
import { checkInputImages } from '../chat/images.js';
import { parseDuration } from '../config/schema.js';
import { KilnError, notFound, validationError } from '../errors.js';
import type { JobKind } from '../jobs/kinds.js';
import { parseJobId } from '../jobs/present.js';
import { isTerminal } from '../jobs/service.js';
import { currentRateHeaders } from '../limits/hook.js';
import { textLength } from '../limits/meter.js';
import type { JobRow } from '../store/types.js';
import { responsesFormat } from './events.js';
import { chatFields, chatMessages, inputItems, Problems, unmatchedOutputs } from './input.js';
import { inputItemsOf, resolveReferences } from './items.js';
import { conversation } from './kind.js';
import { openingEvents, openingText, opensQueued } from './opening.js';
import { RESPONSE_PREFIX, responseOf } from './present.js';
import { responseReplay } from './replay.js';
import { resumeStream } from './resume.js';
import { type Item, ResponseBody, type ResponseEcho, type ResponseJobRequest } from './schema.js';

/** Fields of OpenAI's request that ask for what Kiln does not have: refused rather than ignored. */
const REFUSED: Record<string, string> = {
  conversation:
    'the Conversations API is not available on Kiln; continue a conversation with previous_response_id',
  prompt: 'stored prompt templates are not available on Kiln; send the instructions and input themselves',
};

const ListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
    after: Type.Optional(Type.String({ maxLength: 128 })),
    include: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
    // As OpenAI's own client writes an array in a query: `include[]=…`.
    'include[]': Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  },
  { additionalProperties: false },
);

const RetrieveQuery = Type.Object(
  {
    stream: Type.Optional(Type.Boolean()),
    starting_after: Type.Optional(Type.Integer({ minimum: -1, maximum: 2_147_483_647 })),
    include: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
    'include[]': Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
    include_obfuscation: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

/** `POST /v1/responses` and the stored response's retrieve, cancel, delete and input items. */
export function responseRoutes(app: FastifyInstance, deps: AppDeps): void {
  const kind = deps.jobs.kinds.get('response') as JobKind;
  const syncTimeoutMs = parseDuration(deps.config.jobs.sync_timeout);
  const { store } = deps;

  /** The organisation's stored response: 404 for another's, a deleted one, or one made with `store: false`. */
  async function find(orgId: string, publicId: string, param?: string): Promise<JobRow> {
    const parsed = parseJobId(publicId);
    const job = parsed ? await store.jobs.get(orgId, parsed.id) : undefined;
    const stored =
      job &&
      job.kind === 'response' &&
      (parsed?.prefix === undefined || parsed.prefix === RESPONSE_PREFIX) &&
      (job.expires_at ?? Infinity) > Date.now() &&
      (JSON.parse(job.request) as ResponseJobRequest).echo?.store !== false;
    if (!job || !stored) {
      const error = notFound('response', publicId);
      throw param ? new KilnError('not-found', error.message, { param }) : error;
    }
    return job;
  }

  app.post<{ Body: ResponseBody }>(
    '/v1/responses',
    { schema: { body: ResponseBody }, bodyLimit: inlineImagesBodyLimit(deps.config.files.max_input_bytes) },
    async (request, reply) => {
      const body = request.body;
      const orgId = request.auth.org_id;
      const problems = new Problems();
      for (const [field, why] of Object.entries(REFUSED)) {
        if ((body as Record<string, unknown>)[field] != null) problems.add(field, 'unsupported', why);
      }
      const input = inputItems(body.input, problems);
      const chat = chatFields(body, problems);
      const background = body.background === true;
      const stream = body.stream === true;
      const keep = body.store !== false;
      if (background && !keep)
        problems.add('store', 'conflict', 'a background response is stored: background needs store true');
      if (body.webhook && stream && !background) {
        problems.add(
          'webhook',
          'mode',
          'a stream is answered as it runs; a webhook needs background: true or a response that does not stream',
        );
      }
      const resolved = await resolveReferences(store, orgId, input, problems);
      if (problems.list.length === 0 && resolved.length === 0 && !body.previous_response_id) {
        problems.add(
          'input',
          'minItems',
          'input needs at least one item, unless it continues a response (previous_response_id)',
        );
      }
      problems.throwIfAny();
      const contexts = body.contexts ?? [];
      const preamble = await checkModelAndContexts(deps, orgId, body.model, contexts);
      await checkInputImages(resolved, deps.policy);
      let previous: string | null = null;
      let earlier: Item[] = [];
      if (body.previous_response_id) {
        const prior = await find(orgId, body.previous_response_id, 'previous_response_id');
        if (prior.status !== 'completed') {
          throw validationError([
            {
              field: 'previous_response_id',
              rule: 'state',
              message: `response ${body.previous_response_id} is ${responseOf(prior).status}; only a finished response can be continued`,
            },
          ]);
        }
        previous = prior.id;
        // Every earlier turn must still be there: a deleted one is the caller's 404, not a failed job.
        earlier = await conversation(store, orgId, previous).catch((error: unknown) => {
          const message = error instanceof Error ? error.message : String(error);
          throw new KilnError('not-found', `${message}; the conversation cannot be continued`, {
            param: 'previous_response_id',
          });
        });
      }
      const unmatched = unmatchedOutputs([...earlier, ...resolved], earlier.length);
      if (unmatched.length > 0) throw validationError(unmatched);
      const echo: ResponseEcho = {
        background,
        store: keep,
        stream,
        instructions: body.instructions ?? null,
        max_output_tokens: body.max_output_tokens ?? null,
        metadata: body.metadata ?? {},
        parallel_tool_calls: body.parallel_tool_calls ?? true,
        previous_response_id: body.previous_response_id ?? null,
        temperature: body.temperature ?? null,
        top_p: body.top_p ?? null,
        truncation: body.truncation ?? 'disabled',
        text: { format: body.text?.format ?? { type: 'text' } },
        tool_choice: body.tool_choice ?? 'auto',
        tools: (body.tools ?? []).map((tool) => ({
          strict: null,
          description: null,
          parameters: null,
          ...tool,
        })),
        user: body.user ?? null,
      };
      const job: ResponseJobRequest = {
        model: body.model,
        contexts,
        input: resolved,
        instructions: body.instructions ?? null,
        previous,
        chat,
        echo,
        ...preamble,
        // The persona's preamble, the contexts and the conversation replayed go to the engine too.
        preambleChars: preamble.preambleChars + textLength(chatMessages(earlier)),
      };
      if (stream) {
        await checkWebhook(deps, orgId, body.webhook);
        return streamJob(request, reply, deps.jobs, {
          kind,
          request: job,
          sent: boundRequest(job),
          format: responsesFormat,
          mode: background ? 'async' : 'stream',
          webhook: body.webhook,
          headers: routeOf,
          maxUnsentBytes: deps.config.streams.max_unsent_bytes,
          replay: responseReplay,
          ...(background ? { opening: (id: string) => openingText(id, job) } : {}),
        });
      }
      return submitJob(
        request,
        reply,
        { jobs: deps.jobs, policy: deps.policy, syncTimeoutMs },
        {
          kind,
          mode: background ? 'async' : 'sync',
          request: job,
          sent: boundRequest(job),
          webhook: body.webhook,
          accepted: (row) => ({ status: 200, body: responseOf(row) }),
          headers: (row) => routeOf(row.meta ? (JSON.parse(row.meta) as Record<string, unknown>) : {}),
        },
      );
    },
  );

  app.get<{ Params: { id: string }; Querystring: { stream?: boolean; starting_after?: number } }>(
    '/v1/responses/:id',
    { schema: { querystring: RetrieveQuery } },
    async (request, reply) => {
      const job = await find(request.auth.org_id, request.params.id);
      if (!request.query.stream) return responseOf(job);
      const stored = JSON.parse(job.request) as ResponseJobRequest;
      if (!opensQueued(stored)) {
        throw validationError([
          {
            field: 'stream',
            rule: 'resumable',
            message:
              'only a response created with background: true and stream: true keeps its events to stream again; retrieve this one without stream',
          },
        ]);
      }
      return resumeStream(
        request,
        reply,
        deps.jobs,
        job.id,
        request.query.starting_after ?? -1,
        openingEvents(job.id, stored),
        deps.config.streams.max_unsent_bytes,
        await currentRateHeaders({ store: deps.store, limiter: deps.runtime.limiter }, request.auth),
      );
    },
  );

  app.post<{ Params: { id: string } }>('/v1/responses/:id/cancel', async (request) => {
    const orgId = request.auth.org_id;
    const job = await find(orgId, request.params.id);
    if (!(JSON.parse(job.request) as ResponseJobRequest).echo.background) {
      throw validationError([
        {
          field: 'response_id',
          rule: 'background',
          message:
            'only a background response can be cancelled; a response in the foreground ends when its caller goes away',
        },
      ]);
    }
    if (job.status === 'cancelled') return responseOf(job);
    try {
      return responseOf(await deps.jobs.cancel(orgId, job.id));
    } catch (error) {
      if (!(error instanceof KilnError) || error.code !== 'job-already-terminal') throw error;
      // Said of the response, with the response attached, as this API speaks of responses.
      const ended = await find(orgId, request.params.id);
      throw new KilnError(
        'job-already-terminal',
        `response ${RESPONSE_PREFIX}${ended.id} is already ${responseOf(ended).status}`,
        { attach: { response: responseOf(ended) } },
      );
    }
  });

  app.delete<{ Params: { id: string } }>('/v1/responses/:id', async (request) => {
    const orgId = request.auth.org_id;
    const job = await find(orgId, request.params.id);
    if (!isTerminal(job.status)) await deps.jobs.cancel(orgId, job.id).catch(() => undefined);
    // Its events go with its output: a resumed stream of it would show what was deleted.
    await store.transaction(async (tx) => {
      await tx.jobs.forget(orgId, job.id);
      await tx.responseEvents.clear(job.id);
    });
    return { id: `${RESPONSE_PREFIX}${job.id}`, object: 'response', deleted: true };
  });

  app.get<{
    Params: { id: string };
    Querystring: { limit?: number; order?: 'asc' | 'desc'; after?: string };
  }>('/v1/responses/:id/input_items', { schema: { querystring: ListQuery } }, async (request) => {
    const job = await find(request.auth.org_id, request.params.id);
    const { limit = 20, order = 'desc', after } = request.query;
    let items = inputItemsOf(job.id, JSON.parse(job.request) as ResponseJobRequest);
    if (order === 'desc') items = items.reverse();
    if (after !== undefined) {
      // The last item with that id: an id given twice (two references to one item) cannot loop.
      const at = items.findLastIndex((item) => item.id === after);
      // An id not among them is a mistake, not an empty page (as GET /v1/jobs says).
      if (at === -1)
        throw validationError([
          {
            field: 'after',
            rule: 'exists',
            message: `after must be the id of one of this response's input items (the last id of the previous page); got ${JSON.stringify(after.slice(0, 64))}`,
          },
        ]);
      items = items.slice(at + 1);
    }
    const data = items.slice(0, limit);
    return {
      object: 'list',
      data,
      has_more: items.length > limit,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
    };
  });
}
