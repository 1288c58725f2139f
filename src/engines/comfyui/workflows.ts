import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** A node of a workflow in ComfyUI's API format; an input linked to another node is `[id, index]`. */
export interface WorkflowNode {
  class_type: string;
  inputs: Record<string, unknown>;
}
export type Workflow = Record<string, WorkflowNode>;

/**
 * A workflow template: ComfyUI API-format graphs kept as data files in `workflows/`, with `{{name}}`
 * placeholders that Kiln fills from the request.
 */
export interface WorkflowTemplate {
  model: string;
  kind: 'video' | 'image';
  description: string;
  /** The model's frame rule: `multiple * n + plus` frames, at `fps`. */
  frames?: { multiple: number; plus: number; fps: number };
  /** The node whose saved files are the result. */
  output_node: string;
  graphs: Record<string, Workflow>;
}

export const WORKFLOWS_DIR = fileURLToPath(new URL('../../../workflows/', import.meta.url));

/** Every template in the directory, by Kiln model name. */
export function loadTemplates(dir = WORKFLOWS_DIR): Map<string, WorkflowTemplate> {
  const templates = new Map<string, WorkflowTemplate>();
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()) {
    const template = JSON.parse(readFileSync(`${dir}/${file}`, 'utf8')) as WorkflowTemplate;
    templates.set(template.model, template);
  }
  return templates;
}

/**
 * Frames and rate for a clip of about `seconds`: the nearest length the model's frame rule allows
 * (Wan 4n+1 at 16 fps, LTX 8n+1 at 24–25 fps). 4 s of LTX-Video is 97 frames; 5 s of Wan is 81.
 */
export function framesFor(template: WorkflowTemplate, seconds: number): { length: number; fps: number } {
  const rule = template.frames ?? { multiple: 1, plus: 0, fps: 24 };
  const n = Math.max(1, Math.round((seconds * rule.fps - rule.plus) / rule.multiple));
  return { length: rule.multiple * n + rule.plus, fps: rule.fps };
}

const PLACEHOLDER = /^\{\{([a-z_]+)\}\}$/;

/** A copy of the graph with every `{{name}}` input replaced by `params[name]`; a missing one is a bug. */
export function fill(graph: Workflow, params: Record<string, string | number>): Workflow {
  const filled: Workflow = {};
  for (const [id, node] of Object.entries(graph)) {
    const inputs: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(node.inputs)) {
      const match = typeof value === 'string' ? PLACEHOLDER.exec(value) : null;
      if (match) {
        const param = params[match[1] as string];
        if (param === undefined) throw new Error(`workflow input ${id}.${name} needs {{${match[1]}}}`);
        inputs[name] = param;
      } else inputs[name] = value;
    }
    filled[id] = { class_type: node.class_type, inputs };
  }
  return filled;
}

/** Loader inputs that name a model file, by node class: what a runner must have installed. */
export const MODEL_FILE_INPUTS: Record<string, string> = {
  CheckpointLoaderSimple: 'ckpt_name',
  UNETLoader: 'unet_name',
  CLIPLoader: 'clip_name',
  VAELoader: 'vae_name',
  LoraLoader: 'lora_name',
  CLIPVisionLoader: 'clip_name',
};

/** The model files a template's graphs load. */
export function modelFiles(template: WorkflowTemplate): string[] {
  const files = new Set<string>();
  for (const graph of Object.values(template.graphs)) {
    for (const node of Object.values(graph)) {
      const input = MODEL_FILE_INPUTS[node.class_type];
      const file = input ? node.inputs[input] : undefined;
      if (typeof file === 'string') files.add(file);
    }
  }
  return [...files];
}
