import { readFileSync } from 'node:fs';
import path from 'node:path';
import sharp from 'sharp';
import { REPO_ROOT } from '../helpers/process.js';

/**
 * The captures of a real ComfyUI 0.3.64 (../shared/reference/recordings/comfyui, see its README)
 * and what tests need to hold the simulator and the adapter against them.
 */

const dir = path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'comfyui');

export const recording = (name: string) => JSON.parse(readFileSync(path.join(dir, name), 'utf8'));

export interface RecordedRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
}
export interface RecordedResponse {
  status: number;
  headers: Record<string, string>;
  body?: unknown;
  body_text?: string;
}
export interface WsMessage {
  type: string;
  data: any;
}
export type TimelineEntry =
  | { t_ms: number | null; ws: WsMessage }
  | { t_ms: number | null; http: { request: RecordedRequest; response: RecordedResponse } }
  | { t_ms: number | null; note: string };

export const wsOf = (timeline: TimelineEntry[]) =>
  timeline.flatMap((entry) => ('ws' in entry ? [entry.ws] : []));
export const httpOf = (timeline: TimelineEntry[]) =>
  timeline.flatMap((entry) => ('http' in entry ? [entry.http] : []));

/**
 * One line per `/ws` message, keeping what a client acts on and dropping ids and times: the queue
 * length of a `status`, the node of `executing`, each node's state in `progress_state`, the node
 * where a run stopped.
 */
export function signature(message: WsMessage): string {
  const data = message.data ?? {};
  switch (message.type) {
    case 'status':
      return `status ${data.status?.exec_info?.queue_remaining}${data.sid ? ' (sid)' : ''}`;
    case 'executing':
      return `executing ${data.node}`;
    case 'progress_state':
      return `progress_state ${Object.entries(
        data.nodes as Record<string, { state: string; value: number; max: number }>,
      )
        .map(([id, node]) => `${id}:${node.state}`)
        .join(' ')}`;
    case 'executed':
      return `executed ${data.node}`;
    case 'execution_error':
    case 'execution_interrupted':
      return `${message.type} ${data.node_id} ${data.node_type}`;
    default:
      return message.type;
  }
}

/** A small PNG, as Kiln uploads its input images. */
export const smallPng = (rgb: [number, number, number] = [40, 90, 160]) =>
  sharp({ create: { width: 64, height: 64, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } })
    .png()
    .toBuffer();

/** The image file names a recorded graph loads (`LoadImage`'s `image`). */
export function loadedImages(
  prompt: Record<string, { class_type: string; inputs: Record<string, unknown> }>,
) {
  return Object.values(prompt)
    .filter((node) => node.class_type === 'LoadImage')
    .map((node) => String(node.inputs.image));
}
