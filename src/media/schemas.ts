import { type Static, Type } from '@sinclair/typebox';
import { Webhook } from '../jobs/schemas.js';

/** Request bodies of the image and video endpoints (spec section 4.4, DESIGN.md section 7). */

export const VIDEO_MODELS = ['wan-2.2', 'ltx-video', 'ltx-2.3'] as const;
export const DEFAULT_VIDEO_MODEL = 'ltx-video';

/** Spec section 4.4's sizes, by aspect ratio. */
export const VIDEO_SIZES = [
  '512x512',
  '720x720',
  '1024x1024',
  '832x480',
  '1280x720',
  '1920x1080',
  '480x832',
  '720x1280',
  '1080x1920',
  '1024x1280',
  '1280x1024',
] as const;
export const DEFAULT_VIDEO_SIZE = '832x480';

export const IMAGE_SIZES = [
  '512x512',
  '768x768',
  '1024x1024',
  '1152x896',
  '896x1152',
  '1216x832',
  '832x1216',
  '1344x768',
  '768x1344',
] as const;

const literals = (values: readonly string[]) => Type.Union(values.map((v) => Type.Literal(v)));

export const ImageRef = Type.String({
  pattern: '^(https://[^\\s]+|data:image/(png|jpeg|webp);base64,[A-Za-z0-9+/=\\r\\n]+)$',
  description: 'an https:// URL or a data:image/(png|jpeg|webp);base64,… URI',
});

const Prompt = Type.String({ maxLength: 2000 });
const Seed = Type.Integer({ minimum: 0, maximum: 4294967295 });
const Duration = Type.Integer({ minimum: 1, maximum: 15 });

export const TransitionBody = Type.Object(
  {
    model: Type.Optional(literals(VIDEO_MODELS)),
    start_image: ImageRef,
    end_image: Type.Optional(ImageRef),
    prompt: Type.Optional(Prompt),
    duration_seconds: Type.Optional(Duration),
    size: Type.Optional(literals(VIDEO_SIZES)),
    seed: Type.Optional(Seed),
    negative_prompt: Type.Optional(Prompt),
    webhook: Type.Optional(Webhook),
  },
  { additionalProperties: false },
);
export type TransitionBody = Static<typeof TransitionBody>;

export const VideoGenerationBody = Type.Object(
  {
    model: Type.Optional(literals(VIDEO_MODELS)),
    prompt: Prompt,
    image: Type.Optional(ImageRef),
    duration_seconds: Type.Optional(Duration),
    size: Type.Optional(literals(VIDEO_SIZES)),
    seed: Type.Optional(Seed),
    negative_prompt: Type.Optional(Prompt),
    mode: Type.Optional(Type.Literal('async', { description: 'video generation is async only' })),
    webhook: Type.Optional(Webhook),
  },
  { additionalProperties: false },
);
export type VideoGenerationBody = Static<typeof VideoGenerationBody>;

export const ImageGenerationBody = Type.Object(
  {
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    prompt: Type.String({ minLength: 1, maxLength: 4000 }),
    n: Type.Optional(Type.Integer({ minimum: 1, maximum: 4 })),
    size: Type.Optional(literals(IMAGE_SIZES)),
    response_format: Type.Optional(literals(['url', 'b64_json'])),
    seed: Type.Optional(Seed),
    negative_prompt: Type.Optional(Type.String({ maxLength: 4000 })),
    mode: Type.Optional(literals(['sync', 'async'])),
    webhook: Type.Optional(Webhook),
  },
  { additionalProperties: false },
);
export type ImageGenerationBody = Static<typeof ImageGenerationBody>;

/** Dimensions snapped down to multiples of 32 (720 → 704, 1080 → 1056), as every video model needs. */
export function snapSize(size: string): { width: number; height: number; size: string; adjusted: boolean } {
  const [w, h] = size.split('x').map(Number) as [number, number];
  const width = Math.floor(w / 32) * 32;
  const height = Math.floor(h / 32) * 32;
  return { width, height, size: `${width}x${height}`, adjusted: width !== w || height !== h };
}
