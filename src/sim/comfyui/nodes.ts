/**
 * How the simulated runner describes a node class: ComfyUI's `INPUT_TYPES`, `RETURN_TYPES` and the
 * metadata `GET /object_info` shows, enough to validate a prompt as ComfyUI does (missing inputs,
 * link types, widget ranges, combo values, installed model files) and to answer `/object_info`
 * with the shapes ComfyUI 0.3.64 gives. The classes themselves are in `catalogue.ts`.
 */

/** Model folders as `GET /models` names them; the loaders read from these. */
export const MODEL_FOLDERS = [
  'checkpoints',
  'configs',
  'loras',
  'vae',
  'text_encoders',
  'diffusion_models',
  'clip_vision',
  'style_models',
  'embeddings',
  'diffusers',
  'vae_approx',
  'controlnet',
  'gligen',
  'upscale_models',
  'latent_upscale_models',
  'hypernetworks',
  'photomaker',
  'classifiers',
  'model_patches',
  'audio_encoders',
] as const;
export type ModelFolder = (typeof MODEL_FOLDERS)[number];

export type Input =
  | { kind: 'type'; type: string; extra: Record<string, unknown> }
  | { kind: 'combo'; options: readonly (string | number)[]; extra: Record<string, unknown> }
  /** A combo over the installed files of a model folder, then any fixed choices (VAELoader's `pixel_space`). */
  | { kind: 'files'; folder: ModelFolder; also?: readonly string[]; extra: Record<string, unknown> }
  /** LoadImage's combo over the input directory; checked by the node's own validation. */
  | { kind: 'input-image'; extra: Record<string, unknown> };

export interface NodeClass {
  category: string;
  required: Record<string, Input>;
  optional?: Record<string, Input>;
  /** Inputs ComfyUI fills itself (`PROMPT`, `EXTRA_PNGINFO`), listed by `/object_info`. */
  hidden?: Record<string, string>;
  outputs: string[];
  outputNames?: string[];
  outputTooltips?: (string | null)[];
  /** `null` for a v3 node that declares none; the class name when left out. */
  displayName?: string | null;
  description?: string;
  pythonModule?: string;
  /**
   * A node written against ComfyUI's v3 schema (`comfy_api.latest`): its combos read
   * `["COMBO", {options, multiselect}]`, every input carries an options object, and the class adds
   * `deprecated`, `experimental` and `api_node`.
   */
  v3?: { experimental?: boolean };
  /** An output node: a prompt executes the graph upstream of these. */
  output?: true;
  /** Inputs the node checks itself (ComfyUI's VALIDATE_INPUTS): no generic combo or range check. */
  customValidation?: string[];
}

/** ComfyUI's MAX_RESOLUTION, the upper bound of every width, height and length. */
export const MAX_RESOLUTION = 16384;
/** ComfyUI's 0xffffffffffffffff, which a double rounds to 2^64. */
export const MAX_SEED = 2 ** 64;

type Extra = Record<string, unknown>;

/** An input linked from another node's output of `type`. */
export const link = (type: string, extra: Extra = {}): Input => ({ kind: 'type', type, extra });
export const int = (def: number, min: number, max: number, extra: Extra = {}): Input => ({
  kind: 'type',
  type: 'INT',
  extra: { default: def, min, max, ...extra },
});
export const float = (def: number, min: number, max: number, extra: Extra = {}): Input => ({
  kind: 'type',
  type: 'FLOAT',
  extra: { default: def, min, max, ...extra },
});
export const string = (extra: Extra = {}): Input => ({ kind: 'type', type: 'STRING', extra });
export const boolean = (def: boolean): Input => ({ kind: 'type', type: 'BOOLEAN', extra: { default: def } });
export const combo = (options: readonly (string | number)[], extra: Extra = {}): Input => ({
  kind: 'combo',
  options,
  extra,
});
export const files = (folder: ModelFolder, extra: Extra = {}, also?: readonly string[]): Input => ({
  kind: 'files',
  folder,
  extra,
  ...(also ? { also } : {}),
});

/** The value `/object_info` and a node error's `input_config` show for an input's type. */
export function inputType(
  node: NodeClass,
  input: Input,
  options: readonly (string | number)[] | undefined,
): string | (string | number)[] {
  if (input.kind === 'type') return input.type;
  return node.v3 ? 'COMBO' : [...(options ?? [])];
}

/** An input's options object as ComfyUI shows it (v3 combos carry their options in it). */
export function inputExtra(
  node: NodeClass,
  input: Input,
  options: readonly (string | number)[] | undefined,
): Extra {
  if (node.v3 && input.kind !== 'type')
    return { ...input.extra, multiselect: false, options: [...(options ?? [])] };
  return input.extra;
}

/** ComfyUI's node_info for `GET /object_info`, given the current combo choices. */
export function nodeInfo(
  name: string,
  node: NodeClass,
  choices: (input: Input) => readonly (string | number)[] | undefined,
): Record<string, unknown> {
  const describe = (inputs: Record<string, Input>) =>
    Object.fromEntries(
      Object.entries(inputs).map(([key, input]) => {
        const options = choices(input);
        const extra = inputExtra(node, input, options);
        const type = inputType(node, input, options);
        return [key, node.v3 || Object.keys(extra).length > 0 ? [type, extra] : [type]];
      }),
    );
  const input: Record<string, unknown> = { required: describe(node.required) };
  const order: Record<string, string[]> = { required: Object.keys(node.required) };
  if (node.optional) {
    input.optional = describe(node.optional);
    order.optional = Object.keys(node.optional);
  }
  if (node.hidden) {
    input.hidden = Object.fromEntries(
      Object.entries(node.hidden).map(([key, type]) => [key, node.v3 ? [type] : type]),
    );
    order.hidden = Object.keys(node.hidden);
  }
  const info: Record<string, unknown> = {
    input,
    input_order: order,
    output: node.outputs,
    output_is_list: node.outputs.map(() => false),
    output_name: node.outputNames ?? node.outputs,
    name,
    display_name: node.displayName === undefined ? name : node.displayName,
    description: node.description ?? '',
    python_module: node.pythonModule ?? 'nodes',
    category: node.category,
    output_node: node.output === true,
  };
  if (node.v3) {
    info.output_tooltips = node.outputTooltips ?? node.outputs.map(() => null);
    info.deprecated = false;
    info.experimental = node.v3.experimental === true;
    info.api_node = false;
  } else if (node.outputTooltips) info.output_tooltips = node.outputTooltips;
  return info;
}
