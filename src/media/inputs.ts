import sharp from 'sharp';
import { type ErrorDetail, KilnError, validationError } from '../errors.js';
import { JobFailure } from '../jobs/kinds.js';
import { createOutboundAgent, requestFollowingRedirects } from '../net/http.js';
import type { OutboundPolicy } from '../net/policy.js';

/** An image input, checked: its bytes, what they are, and where it came from. */
export interface ImageInput {
  data: Buffer;
  contentType: string;
}

/** Image formats taken, by sharp's name: its content type, and its name in an error. */
export type ImageFormats = Record<string, { type: string; name: string }>;

/** What ComfyUI's image loader takes. */
const FORMATS: ImageFormats = {
  png: { type: 'image/png', name: 'PNG' },
  jpeg: { type: 'image/jpeg', name: 'JPEG' },
  webp: { type: 'image/webp', name: 'WebP' },
};

/** What OpenAI's chat models take: the same and GIF. */
export const CHAT_IMAGE_FORMATS: ImageFormats = { ...FORMATS, gif: { type: 'image/gif', name: 'GIF' } };

const named = (formats: ImageFormats) => {
  const names = Object.values(formats).map((f) => f.name);
  return `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
};

function refuse(field: string, rule: string, message: string, extra: Partial<ErrorDetail> = {}): never {
  throw validationError([{ field, rule, message, ...extra }]);
}

/**
 * The most pixels an image input may have: a 48-megapixel photo, no more. A few kilobytes of PNG
 * can claim 16000×16000 pixels, whose decoding holds a thread of the pool that file reads share
 * for seconds; the header says so before anything is decoded.
 */
export const MAX_INPUT_PIXELS = 50_000_000;

/**
 * The bytes must decode as a PNG, JPEG or WebP image of at most MAX_INPUT_PIXELS, wholly (a
 * header with the rest cut off reads as an image but fails the job later, in the runner); answers
 * its content type.
 */
async function imageType(data: Buffer, field: string, formats = FORMATS): Promise<string> {
  let size = { width: 0, height: 0 };
  try {
    // The header alone first: what a decode would cost is known before one starts.
    const { format, width = 0, height = 0 } = await sharp(data, { limitInputPixels: false }).metadata();
    size = { width, height };
    const type = format ? formats[format]?.type : undefined;
    if (type && width * height <= MAX_INPUT_PIXELS) {
      await sharp(data, { failOn: 'truncated', limitInputPixels: MAX_INPUT_PIXELS }).stats();
      return type;
    }
  } catch {}
  const pixels = size.width * size.height;
  if (pixels > MAX_INPUT_PIXELS) {
    return refuse(
      field,
      'max_pixels',
      `${field} is ${size.width}×${size.height} pixels; images are capped at ${MAX_INPUT_PIXELS} pixels`,
      { limit: MAX_INPUT_PIXELS, received: pixels },
    );
  }
  return refuse(field, 'image', `${field} does not decode as a ${named(formats)} image`);
}

/** The longest `data:` URI taken, whatever `files.max_input_bytes` says (about 21 MB decoded). */
const MAX_DATA_URI_LENGTH = 28_000_000;

function decodeDataUri(uri: string, field: string, maxBytes: number): Buffer {
  if (uri.length > MAX_DATA_URI_LENGTH) {
    refuse(
      field,
      'max_length',
      `${field} is a data: URI of ${uri.length} characters; at most ${MAX_DATA_URI_LENGTH}`,
      {
        limit: MAX_DATA_URI_LENGTH,
        received: uri.length,
      },
    );
  }
  const comma = uri.indexOf(',');
  const data = Buffer.from(uri.slice(comma + 1), 'base64');
  if (data.length === 0) refuse(field, 'image', `${field} holds no image data`);
  if (data.length > maxBytes) {
    refuse(field, 'max_bytes', `${field} is ${data.length} bytes; images are capped at ${maxBytes}`, {
      limit: maxBytes,
      received: data.length,
    });
  }
  return data;
}

/**
 * Checks an image reference before any job exists: a `data:` URI is decoded (never fetched) and
 * must be an image within the cap; an `https://` URL must pass the outbound policy.
 */
export async function checkImageRef(
  ref: string,
  field: string,
  policy: OutboundPolicy,
  maxBytes: number,
): Promise<void> {
  if (ref.startsWith('data:')) {
    await imageType(decodeDataUri(ref, field, maxBytes), field);
    return;
  }
  await policy.checkUrl(ref, field, { schemes: ['https:'] });
}

/**
 * The image itself, when the job runs: decoded, or fetched with every hop and address checked. A
 * URL that gives no image (unreachable, not 200, too large, not an image, a hop not allowed) fails
 * the job `invalid-image-url`, its `param` the field.
 */
export async function loadImage(
  ref: string,
  field: string,
  policy: OutboundPolicy,
  maxBytes: number,
  signal: AbortSignal,
  formats = FORMATS,
): Promise<ImageInput> {
  if (ref.startsWith('data:')) {
    const data = decodeDataUri(ref, field, maxBytes);
    return { data, contentType: await imageType(data, field, formats) };
  }
  try {
    return await fetchImage(ref, field, policy, maxBytes, signal, formats);
  } catch (error) {
    // Checked before the job existed, the URL gave no image now: the caller's error, not the run's.
    if (!(error instanceof KilnError) || error.status >= 500 || signal.aborted) throw error;
    throw new JobFailure('invalid-image-url', error.message, { param: field });
  }
}

async function fetchImage(
  ref: string,
  field: string,
  policy: OutboundPolicy,
  maxBytes: number,
  signal: AbortSignal,
  formats: ImageFormats,
): Promise<ImageInput> {
  const agent = createOutboundAgent(policy, { headersTimeout: 30_000, bodyTimeout: 30_000 });
  try {
    const response = await requestFollowingRedirects(agent, policy, ref, {
      field,
      schemes: ['https:'],
      signal,
    }).catch((error: unknown) => {
      // A failure of the network or of TLS, said of the field it was for (a request may have two).
      if (error instanceof KilnError || signal.aborted) throw error;
      const { code, message } = error as { code?: unknown; message?: unknown };
      const why = typeof code === 'string' ? code : String(message ?? error).split('\n')[0];
      return refuse(field, 'fetch', `${field} could not be fetched: ${why}`);
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      refuse(field, 'fetch', `${field} answered HTTP ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body) {
      size += (chunk as Buffer).length;
      if (size > maxBytes)
        refuse(field, 'max_bytes', `${field} is larger than ${maxBytes} bytes`, { limit: maxBytes });
      chunks.push(chunk as Buffer);
    }
    const data = Buffer.concat(chunks);
    return { data, contentType: await imageType(data, field, formats) };
  } finally {
    await agent.close();
  }
}
