import { createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ImageGenerationBody, TransitionBody, VideoGenerationBody } from '../media/schemas.js';

/** POST /v1/videos/transitions: start_image (and end_image) as https:// URLs or data:image/… URIs. */
export type TransitionRequest = TransitionBody;

/** POST /v1/videos/generations (always async). */
export type VideoGenerationRequest = Omit<VideoGenerationBody, 'mode'>;

/** POST /v1/images/generations: the OpenAI images body plus `mode` and `webhook`. */
export type ImageRequest = Omit<ImageGenerationBody, 'mode' | 'response_format'> & {
  mode?: 'sync' | 'async';
  response_format?: 'url' | 'b64_json';
};

/** The 202 answer to a video submission. */
export interface VideoSubmission {
  id: string;
  object: 'video.transition' | 'video.generation';
  status: 'queued';
  polling_url: string;
  created: number;
  /** The model that renders it (a free-tier key always gets ltx-video). */
  model: string;
  /** The size rendered, snapped down to multiples of 32. */
  size: string;
  /** Transitions only: true when snapping changed the size asked for. */
  size_adjusted?: boolean;
}

/** The 202 answer to an async image submission (or a sync one that outlasted the gateway's timeout). */
export interface ImageSubmission {
  id: string;
  object: 'image.generation.async';
  status: string;
  polling_url: string;
  created: number;
  message?: string;
}

/** A completed video job's `result`. */
export interface VideoResult {
  /** Signed, expiring, absolute: downloadable without a key. */
  url: string;
  file_id: string;
  duration_ms: number | null;
  width: number | null;
  height: number | null;
  fps: number | null;
  content_type: string;
}

/** An image generation's answer (sync), or a completed image job's `result`. */
export interface ImagesResult {
  created: number;
  data: Array<{ url: string } | { b64_json: string }>;
}

export interface DownloadProgress {
  received: number;
  /** From Content-Length; undefined when the server did not say. */
  total: number | undefined;
}

export interface DownloadOptions {
  /** Called as bytes arrive. */
  onProgress?: (progress: DownloadProgress) => void;
  signal?: AbortSignal;
}

export interface Downloaded {
  path: string;
  bytes: number;
  contentType: string | undefined;
}

/**
 * Streams a response body to `file`, through a temporary sibling renamed into place at the end, so
 * a failed or interrupted download never leaves a truncated file under the name asked for.
 */
export async function saveBody(
  response: Response,
  file: string,
  options: DownloadOptions,
): Promise<Downloaded> {
  // A compressed body arrives decoded, so its Content-Length says nothing of the bytes written.
  const lengthHeader = response.headers.get('content-encoding')
    ? null
    : response.headers.get('content-length');
  const total = lengthHeader === null ? undefined : Number(lengthHeader);
  const partial = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.part`);
  let received = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      received += chunk.length;
      options.onProgress?.({ received, total });
      callback(null, chunk);
    },
  });
  try {
    const body = response.body
      ? Readable.fromWeb(response.body as import('node:stream/web').ReadableStream<Uint8Array>)
      : Readable.from([]);
    // The fetch carries options.signal, so aborting it ends this body too.
    await pipeline(body, counter, createWriteStream(partial));
    if (total !== undefined && Number.isFinite(total) && received !== total) {
      throw new Error(`the download of ${file} stopped after ${received} of ${total} bytes`);
    }
    await rename(partial, file);
  } catch (error) {
    await rm(partial, { force: true });
    throw error;
  }
  return { path: file, bytes: received, contentType: response.headers.get('content-type') ?? undefined };
}
