import type { FastifyInstance } from 'fastify';
import { parseDuration } from '../config/schema.js';
import { KilnError, validationError } from '../errors.js';
import type { JobKind } from '../jobs/kinds.js';
import { checkImageRef } from '../media/inputs.js';
import type { ImageJobRequest, VideoJobRequest } from '../media/kinds.js';
import {
  DEFAULT_VIDEO_MODEL,
  DEFAULT_VIDEO_SIZE,
  ImageGenerationBody,
  snapSize,
  TransitionBody,
  VideoGenerationBody,
} from '../media/schemas.js';
import type { AppDeps } from './app.js';
import { submitJob } from './submit.js';

/**
 * A random seed when the caller gives none, so every job records the seed that made it. An
 * Idempotency-Key binds the body as sent (`sent`), without it: the same body again is the same job.
 */
const randomSeed = () => Math.floor(Math.random() * 4294967296);

/** POST /v1/videos/transitions, /v1/videos/generations and /v1/images/generations. */
/**
 * The body a request with images inline may reach: two of `files.max_input_bytes` as base64 (4/3 of
 * their size) plus the rest of the body. Media inputs, and images in chat and Responses messages.
 */
export const inlineImagesBodyLimit = (maxBytes: number): number =>
  Math.ceil((maxBytes * 2 * 4) / 3) + 256 * 1024;

export function mediaRoutes(app: FastifyInstance, deps: AppDeps): void {
  const kind = (name: string) => deps.jobs.kinds.get(name) as JobKind;
  const submitDeps = {
    jobs: deps.jobs,
    policy: deps.policy,
    syncTimeoutMs: parseDuration(deps.config.jobs.sync_timeout),
  };
  const maxBytes = deps.config.files.max_input_bytes;
  const bodyLimit = inlineImagesBodyLimit(maxBytes);
  /**
   * Every image, and the webhook's address, checked before the job exists: one 400 lists every
   * problem among them (the webhook is checked again, with its secret set up, on submission).
   */
  const checkImages = async (
    refs: Record<string, string | undefined>,
    webhook: { url: string } | undefined,
  ) => {
    const refused: KilnError[] = [];
    const collect = async (check: Promise<unknown>) => {
      try {
        await check;
      } catch (error) {
        // A 400 of its own (`validation-failed`, `unsafe-url`) joins the others; anything else stands.
        if (!(error instanceof KilnError && error.status === 400 && error.details)) throw error;
        refused.push(error);
      }
    };
    for (const [field, ref] of Object.entries(refs))
      if (ref) await collect(checkImageRef(ref, field, deps.policy, maxBytes));
    if (refused.length === 0) return;
    if (webhook) await collect(deps.policy.checkUrl(webhook.url, 'webhook.url'));
    // One problem keeps its own code; several are a validation failure listing each.
    throw refused.length === 1 ? refused[0] : validationError(refused.flatMap((e) => e.details ?? []));
  };

  /** The stored request of a video job: sizes snapped, seed fixed, the images it animates. */
  const video = (
    body: TransitionBody | VideoGenerationBody,
    model: string,
    images: { start_image?: string | undefined; end_image?: string | undefined },
  ): VideoJobRequest => {
    const size = snapSize(body.size ?? DEFAULT_VIDEO_SIZE);
    return {
      model,
      prompt: body.prompt ?? '',
      negative_prompt: body.negative_prompt ?? '',
      seed: body.seed ?? randomSeed(),
      duration_seconds: body.duration_seconds ?? 4,
      width: size.width,
      height: size.height,
      size: size.size,
      size_adjusted: size.adjusted,
      ...(images.start_image ? { start_image: images.start_image } : {}),
      ...(images.end_image ? { end_image: images.end_image } : {}),
    };
  };

  app.post<{ Body: TransitionBody }>(
    '/v1/videos/transitions',
    { schema: { body: TransitionBody }, bodyLimit },
    async (request, reply) => {
      const body = request.body;
      // The free tier renders with LTX-Video, whatever it asked for.
      const model = request.auth.tier === 'free' ? 'ltx-video' : (body.model ?? DEFAULT_VIDEO_MODEL);
      await checkImages({ start_image: body.start_image, end_image: body.end_image }, body.webhook);
      return submitJob(request, reply, submitDeps, {
        kind: kind('video.transition'),
        mode: 'async',
        request: video(body, model, { start_image: body.start_image, end_image: body.end_image }),
        // The model a free key is held to is Kiln's choice, not the body's: bound with it.
        sent: { ...body, model },
        webhook: body.webhook,
      });
    },
  );

  app.post<{ Body: VideoGenerationBody }>(
    '/v1/videos/generations',
    { schema: { body: VideoGenerationBody }, bodyLimit },
    async (request, reply) => {
      const body = request.body;
      const model = body.model ?? DEFAULT_VIDEO_MODEL;
      if (!body.image && !deps.runtime.templates.get(model)?.graphs.text_only) {
        throw validationError([
          { field: 'image', rule: 'required', message: `${model} animates an image: image is required` },
        ]);
      }
      await checkImages({ image: body.image }, body.webhook);
      return submitJob(request, reply, submitDeps, {
        kind: kind('video.generation'),
        mode: 'async',
        request: video(body, model, { start_image: body.image }),
        sent: body,
        webhook: body.webhook,
      });
    },
  );

  app.post<{ Body: ImageGenerationBody }>(
    '/v1/images/generations',
    { schema: { body: ImageGenerationBody }, bodyLimit },
    async (request, reply) => {
      const body = request.body;
      const model = body.model ?? 'sdxl';
      if (deps.runtime.templates.get(model)?.kind !== 'image') {
        throw new KilnError('model-not-found', `no image model named '${model}'; GET /v1/models lists them`, {
          param: 'model',
        });
      }
      const [width, height] = (body.size ?? '1024x1024').split('x').map(Number) as [number, number];
      const job: ImageJobRequest = {
        model,
        prompt: body.prompt,
        negative_prompt: body.negative_prompt ?? '',
        seed: body.seed ?? randomSeed(),
        n: body.n ?? 1,
        width,
        height,
        response_format: (body.response_format ?? 'url') as ImageJobRequest['response_format'],
      };
      return submitJob(request, reply, submitDeps, {
        kind: kind('image.generation'),
        mode: (body.mode ?? 'sync') as 'sync' | 'async',
        request: job,
        sent: body,
        webhook: body.webhook,
      });
    },
  );
}
