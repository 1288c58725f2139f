import type { ChatMessage } from '../engines/types.js';
import { validationError } from '../errors.js';
import { CHAT_IMAGE_FORMATS, loadImage } from '../media/inputs.js';
import type { OutboundPolicy } from '../net/policy.js';

/** What Kiln needs to fetch a message's images itself: the outbound policy and the size cap. */
export interface ImageFetching {
  policy: OutboundPolicy;
  maxBytes: number;
}

interface ImagePart {
  type: 'image_url';
  image_url: { url: string; detail?: string } | string;
}

const isImagePart = (part: unknown): part is ImagePart =>
  (part as { type?: unknown } | null)?.type === 'image_url';

const urlOf = (part: ImagePart): unknown =>
  typeof part.image_url === 'string' ? part.image_url : part.image_url?.url;

/** Every content part of the messages, with the field that names it in an error. */
function* contentParts(messages: readonly ChatMessage[]) {
  for (const [m, message] of messages.entries()) {
    const { content } = message as { content?: unknown };
    if (!Array.isArray(content)) continue;
    for (const [p, part] of content.entries())
      yield { part: part as unknown, at: `messages[${m}].content[${p}]` };
  }
}

/** Every image part of the messages, with the field that names its URL in an error. */
function* imageParts(messages: readonly ChatMessage[]) {
  for (const { part, at } of contentParts(messages)) {
    if (isImagePart(part)) yield { part, field: `${at}.image_url` };
  }
}

/**
 * Checks the images of chat messages before any job exists (DESIGN.md section 5): a `data:image/…`
 * URI as it is, for the engine to decode; an `https://` URL must pass the outbound policy. Any
 * other reference (`http:`, `file:`, …) is refused: the engine would dial it from inside the GPU
 * network, where Kiln cannot check what it reaches.
 */
export async function checkMessageImages(
  messages: readonly ChatMessage[],
  policy: OutboundPolicy,
): Promise<void> {
  refuseOtherUrls(messages);
  for (const { part, field } of imageParts(messages)) await checkImageUrl(urlOf(part), field, policy);
}

/** A reference an engine would dial: `scheme://…`, or a local `file:` path. `data:` is inline. */
const DIALLED = /^(?:[a-z][a-z0-9+.-]*:\/\/|file:)/i;

/**
 * Content parts other than text and images go to the engine as sent, and vLLM and SGLang fetch a
 * `video_url` or `audio_url` themselves, from inside the GPU network: any such part that names a
 * URL (at any depth) is refused before a job exists, as an image's `http:` URL is. Inline media
 * (`data:` URIs, `input_audio`'s base64) passes.
 */
function refuseOtherUrls(messages: readonly ChatMessage[]): void {
  const found = (value: unknown, at: string): string | undefined => {
    if (typeof value === 'string') return DIALLED.test(value) ? at : undefined;
    if (typeof value !== 'object' || value === null) return undefined;
    for (const [key, inner] of Object.entries(value)) {
      const field = found(inner, Array.isArray(value) ? `${at}[${key}]` : `${at}.${key}`);
      if (field) return field;
    }
    return undefined;
  };
  for (const { part, at } of contentParts(messages)) {
    const type = (part as { type?: unknown } | null)?.type;
    if (type === 'text' || type === 'refusal' || type === 'image_url') continue;
    const field = found(part, at);
    if (!field) continue;
    throw validationError([
      {
        field,
        rule: 'outbound',
        message: `${field} is a URL the engine would fetch itself, from where Kiln cannot check what it reaches; Kiln fetches image_url parts alone: give this media inline, as a data: URI`,
      },
    ]);
  }
}

/** The same for a Responses request's input items: `input_image` parts, named by their own item. */
export async function checkInputImages(
  items: ReadonlyArray<Record<string, unknown>>,
  policy: OutboundPolicy,
): Promise<void> {
  for (const [i, item] of items.entries()) {
    const parts = Array.isArray(item.content) ? (item.content as Array<Record<string, unknown>>) : [];
    for (const [j, part] of parts.entries()) {
      if (part?.type === 'input_image') {
        await checkImageUrl(part.image_url, `input[${i}].content[${j}].image_url`, policy);
      }
    }
  }
}

/** One image reference of a chat or Responses request, by the rules above. */
async function checkImageUrl(url: unknown, field: string, policy: OutboundPolicy): Promise<void> {
  if (typeof url !== 'string' || url === '') {
    throw validationError([{ field, rule: 'required', message: `${field} needs a url` }]);
  }
  if (/^data:image\//i.test(url)) return;
  await policy.checkUrl(url, field, { schemes: ['https:'] });
}

/**
 * The messages with every `https://` image fetched by Kiln, each hop's address checked again as it
 * is dialled, and handed to the engine as a `data:` URI: the engine dials nothing. Messages without
 * images are the same objects.
 */
export async function inlineMessageImages(
  messages: readonly ChatMessage[],
  fetching: ImageFetching,
  signal: AbortSignal,
): Promise<ChatMessage[]> {
  const fetched = new Map<ImagePart, string>();
  for (const { part, field } of imageParts(messages)) {
    const url = urlOf(part);
    if (typeof url !== 'string' || /^data:/i.test(url)) continue;
    const image = await loadImage(url, field, fetching.policy, fetching.maxBytes, signal, CHAT_IMAGE_FORMATS);
    fetched.set(part, `data:${image.contentType};base64,${image.data.toString('base64')}`);
  }
  if (fetched.size === 0) return [...messages];
  return messages.map((message) => {
    const { content } = message as { content?: unknown };
    if (!Array.isArray(content) || !content.some((part) => fetched.has(part))) return message;
    return {
      ...message,
      content: content.map((part) => {
        const url = fetched.get(part);
        if (url === undefined) return part;
        const detail = typeof part.image_url === 'string' ? undefined : part.image_url.detail;
        return { ...part, image_url: { url, ...(detail === undefined ? {} : { detail }) } };
      }),
    } as ChatMessage;
  });
}
