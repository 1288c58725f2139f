import { NODE_CLASSES } from './catalogue.js';
import type { Prompt, PromptNode } from './validate.js';

/**
 * What a validated prompt asks the simulator to produce, read from the graph the way the real
 * nodes would see it: sizes and frame counts from the latent/conditioning node, the frame rate from
 * the save node (or LTXVConditioning), the input images from the LoadImage nodes feeding the start
 * and end slots, the prompt text and seed for deterministic pictures.
 */

export type Container = 'webm' | 'mp4' | 'mkv' | 'gif' | 'webp' | 'png';

export interface OutputPlan {
  node: string;
  classType: string;
  container: Container;
  /** Where the files go and how `GET /view` finds them. */
  folderType: 'output' | 'temp';
  filenamePrefix: string;
  width: number;
  height: number;
  /** Frames of a video, or pictures of an image batch. */
  frames: number;
  fps: number;
  /** SaveWEBM's quality, when the graph sets it. */
  crf?: number;
  /** LoadImage names feeding the first and the last frame. */
  startImage?: string;
  endImage?: string;
  text: string;
  seed: number;
  /** VideoHelperSuite lists its files under `gifs` with a MIME `format`. */
  vhsFormat?: string;
}

const isLink = (value: unknown): value is [string, number] =>
  Array.isArray(value) && value.length === 2 && typeof value[1] === 'number';

const linkedIds = (node: PromptNode) =>
  Object.values(node.inputs)
    .filter(isLink)
    .map(([id]) => String(id));

/** A topological order of the nodes the outputs need, dependencies first (each node once). */
export function executionOrder(prompt: Prompt, outputs: string[]): string[] {
  const order: string[] = [];
  const seen = new Set<string>();
  const visit = (id: string) => {
    if (seen.has(id) || !prompt[id]) return;
    seen.add(id);
    for (const from of linkedIds(prompt[id])) visit(from);
    order.push(id);
  };
  for (const output of outputs) visit(output);
  return order;
}

/** The nodes upstream of `id`, nearest first. */
function upstream(prompt: Prompt, id: string): string[] {
  const found: string[] = [];
  const seen = new Set([id]);
  const queue = [id];
  while (queue.length > 0) {
    const current = prompt[queue.shift() as string];
    if (!current) continue;
    for (const from of linkedIds(current)) {
      if (seen.has(from)) continue;
      seen.add(from);
      found.push(from);
      queue.push(from);
    }
  }
  return found;
}

const num = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;

/** The LoadImage behind an IMAGE link, through any image-processing nodes in between. */
function traceImage(prompt: Prompt, value: unknown, depth = 0): string | undefined {
  if (!isLink(value) || depth > 16) return undefined;
  const node = prompt[String(value[0])];
  if (!node) return undefined;
  if (node.class_type === 'LoadImage') return String(node.inputs.image);
  const spec = NODE_CLASSES[node.class_type];
  for (const [name, input] of Object.entries({ ...spec?.required, ...spec?.optional })) {
    if (input.kind === 'type' && input.type === 'IMAGE') {
      const found = traceImage(prompt, node.inputs[name], depth + 1);
      if (found) return found;
    }
  }
  return undefined;
}

function container(node: PromptNode): { container: Container; vhsFormat?: string } {
  switch (node.class_type) {
    case 'SaveWEBM':
      return { container: 'webm' };
    case 'SaveVideo': {
      const format = String(node.inputs.format ?? 'auto');
      const codec = String(node.inputs.codec ?? 'auto');
      if (format === 'webm' || (format === 'auto' && codec === 'av1')) return { container: 'webm' };
      return { container: format === 'mkv' ? 'mkv' : 'mp4' };
    }
    case 'VHS_VideoCombine': {
      const format = String(node.inputs.format ?? 'image/gif');
      const byFormat: Record<string, Container> = {
        'video/webm': 'webm',
        'video/h264-mp4': 'mp4',
        'image/webp': 'webp',
        'image/gif': 'gif',
      };
      return { container: byFormat[format] ?? 'gif', vhsFormat: format };
    }
    default:
      return { container: 'png' };
  }
}

export function planOutput(prompt: Prompt, id: string): OutputPlan {
  const node = prompt[id] as PromptNode;
  const above = upstream(prompt, id).map((n) => [n, prompt[n] as PromptNode] as const);
  const { container: kind, vhsFormat } = container(node);

  const sized = above.find(([, n]) => num(n.inputs.width) && num(n.inputs.height));
  const video = above.find(([, n]) => num(n.inputs.width) && num(n.inputs.height) && num(n.inputs.length));
  const sizeNode = (video ?? sized)?.[1];
  const width = num(sizeNode?.inputs.width) ?? 512;
  const height = num(sizeNode?.inputs.height) ?? 512;
  const length = num(video?.[1].inputs.length);
  // RepeatImageBatch multiplies the pictures on their way to the save node.
  const repeat = above
    .filter(([, n]) => n.class_type === 'RepeatImageBatch')
    .reduce((product, [, n]) => product * (num(n.inputs.amount) ?? 1), 1);
  const batch = (num(sizeNode?.inputs.batch_size) ?? 1) * repeat;

  let fps = num(node.inputs.fps) ?? num(node.inputs.frame_rate);
  if (fps === undefined && isLink(node.inputs.video)) fps = num(prompt[node.inputs.video[0]]?.inputs.fps);
  fps ??= above.map(([, n]) => num(n.inputs.frame_rate)).find((v) => v !== undefined) ?? 24;

  const videoNode = video?.[1];
  // Without a video latent node, the saved pictures come from a LoadImage (through any image nodes).
  const startImage = videoNode
    ? traceImage(prompt, videoNode.inputs.start_image ?? videoNode.inputs.image)
    : traceImage(prompt, node.inputs.images);
  let endImage = videoNode ? traceImage(prompt, videoNode.inputs.end_image) : undefined;
  if (!endImage) {
    // LTX: an end keyframe is an LTXVAddGuide at the last frame (frame_idx -1) or the highest index.
    const guides = above
      .filter(([, n]) => n.class_type === 'LTXVAddGuide')
      .map(([, n]) => n)
      .sort((a, b) => guideRank(b) - guideRank(a));
    for (const guide of guides) {
      endImage = traceImage(prompt, guide.inputs.image);
      if (endImage) break;
    }
  }

  const texts = above
    .filter(([, n]) => n.class_type === 'CLIPTextEncode' && typeof n.inputs.text === 'string')
    .map(([, n]) => n.inputs.text as string);
  const seed =
    above.map(([, n]) => num(n.inputs.seed) ?? num(n.inputs.noise_seed)).find((v) => v !== undefined) ?? 0;

  return {
    node: id,
    classType: node.class_type,
    container: kind,
    folderType: node.class_type === 'PreviewImage' ? 'temp' : 'output',
    filenamePrefix:
      node.class_type === 'PreviewImage' ? 'ComfyUI_temp_' : String(node.inputs.filename_prefix ?? 'ComfyUI'),
    width,
    height,
    frames: kind === 'png' ? (length ?? 1) * batch : (length ?? batch),
    fps,
    ...(num(node.inputs.crf) !== undefined ? { crf: num(node.inputs.crf) } : {}),
    ...(startImage !== undefined ? { startImage } : {}),
    ...(endImage !== undefined ? { endImage } : {}),
    text: texts.join('\n'),
    seed,
    ...(vhsFormat !== undefined ? { vhsFormat } : {}),
  };
}

const guideRank = (guide: PromptNode) => {
  const index = num(guide.inputs.frame_idx) ?? 0;
  return index < 0 ? Number.MAX_SAFE_INTEGER + index : index;
};

/** Every string input of the given nodes: where the `[sim:fail]` marker is looked for. */
export function promptStrings(prompt: Prompt, ids: string[]): string[] {
  return ids.flatMap((id) =>
    Object.values(prompt[id]?.inputs ?? {}).filter((v): v is string => typeof v === 'string'),
  );
}
