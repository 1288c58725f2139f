import { EngineError } from '../types.js';
import { MODEL_FILE_INPUTS } from './workflows.js';

/** One model file a runner lacks, as its `value_not_in_list` node error names it. */
export interface MissingModel {
  node: string;
  classType: string;
  input: string;
  /** The runner's own words: `Value not in list: unet_name: 'x.safetensors' not in []`. */
  text: string;
}

/**
 * The runner refused the workflow because model files it names are not installed
 * (`value_not_in_list` on a loader's model input). `upstream` lists every one in the runner's own
 * words, node by node: `UNETLoader (node 1): Value not in list: unet_name: '…' not in []; …`.
 */
export class ModelMissingError extends Error {
  readonly upstream: string;

  constructor(readonly missing: MissingModel[]) {
    const upstream = missing.map((m) => `${m.classType} (node ${m.node}): ${m.text}`).join('; ');
    const what = missing.length === 1 ? 'a model file' : `${missing.length} model files`;
    super(`the runner does not have ${what} this workflow needs: ${upstream}`);
    this.name = 'ModelMissingError';
    this.upstream = upstream;
  }
}

interface NodeError {
  type?: string;
  message?: string;
  details?: string;
  extra_info?: { input_name?: unknown };
}

/** ComfyUI's 400 body for `POST /prompt`. */
export interface PromptRefusalBody {
  error?: { type?: string; message?: string; details?: string } | string;
  node_errors?: Record<string, { class_type?: string; errors?: NodeError[] }>;
}

/** Node ids in ComfyUI's usual order: numeric ones by value, then the others by name. */
const byNodeId = (a: string, b: string) => {
  const [x, y] = [Number(a), Number(b)];
  if (Number.isInteger(x) && Number.isInteger(y)) return x - y;
  if (Number.isInteger(x) !== Number.isInteger(y)) return Number.isInteger(x) ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
};

const words = (error: NodeError) => `${error.message ?? ''}: ${error.details ?? ''}`.trim();

/** Every model file the refusal says is missing: a loader's model input not among its choices. */
export function missingModels(body: PromptRefusalBody): MissingModel[] {
  const missing: MissingModel[] = [];
  const nodes = Object.entries(body.node_errors ?? {}).sort(([a], [b]) => byNodeId(a, b));
  for (const [node, entry] of nodes) {
    const classType = entry.class_type ?? '';
    const modelInput = MODEL_FILE_INPUTS[classType];
    if (!modelInput) continue;
    for (const error of entry.errors ?? []) {
      if (error.type !== 'value_not_in_list') continue;
      // A loader's other inputs (CLIPLoader's `type`, UNETLoader's `weight_dtype`) are not models.
      const input = error.extra_info?.input_name;
      if (input !== undefined && input !== modelInput) continue;
      missing.push({ node, classType, input: modelInput, text: words(error) });
    }
  }
  return missing;
}

/** ComfyUI's 400 for a prompt, as an engine error — or a model-missing error when loaders lack their files. */
export function promptRefusal(body: PromptRefusalBody): Error {
  const missing = missingModels(body);
  if (missing.length > 0) return new ModelMissingError(missing);
  const error = typeof body.error === 'string' ? { message: body.error } : (body.error ?? {});
  const first = Object.values(body.node_errors ?? {})[0]?.errors?.[0];
  const why = first ? words(first) : (error.details ?? '');
  return new EngineError(
    `the runner refused the workflow: ${error.message ?? 'invalid prompt'}${why ? ` (${why})` : ''}`,
    'rejected',
    true,
    400,
  );
}
