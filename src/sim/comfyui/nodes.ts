/**
 * The node classes the simulated runner knows, described the way ComfyUI's `INPUT_TYPES` and
 * `RETURN_TYPES` describe them: enough to validate a prompt as ComfyUI does (missing inputs, link
 * types, widget ranges, combo values, installed model files) and to answer `GET /object_info`.
 * A class_type not listed here is a custom node that is not installed (`missing_node_type`).
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

/** ComfyUI's MAX_RESOLUTION, the upper bound of every width, height and length. */
const MAX_RESOLUTION = 16384;
/** ComfyUI's 0xffffffffffffffff, which a double rounds to 2^64. */
const MAX_SEED = 2 ** 64;

export type Input =
  | { kind: 'type'; type: string; extra: Record<string, unknown> }
  | { kind: 'combo'; options: readonly (string | number)[]; extra: Record<string, unknown> }
  /** A combo over the installed files of a model folder. */
  | { kind: 'files'; folder: ModelFolder; extra: Record<string, unknown> }
  /** LoadImage's combo over the input directory; checked by the node's own validation. */
  | { kind: 'input-image'; extra: Record<string, unknown> };

export interface NodeClass {
  category: string;
  required: Record<string, Input>;
  optional?: Record<string, Input>;
  outputs: string[];
  outputNames?: string[];
  /** An output node: a prompt executes the graph upstream of these. */
  output?: true;
  /** Inputs the node checks itself (ComfyUI's VALIDATE_INPUTS): no generic combo or range check. */
  customValidation?: string[];
}

const link = (type: string): Input => ({ kind: 'type', type, extra: {} });
const int = (def: number, min: number, max: number, step = 1): Input => ({
  kind: 'type',
  type: 'INT',
  extra: { default: def, min, max, step },
});
const float = (def: number, min: number, max: number, step = 0.01): Input => ({
  kind: 'type',
  type: 'FLOAT',
  extra: { default: def, min, max, step },
});
const string = (def: string, multiline = false): Input => ({
  kind: 'type',
  type: 'STRING',
  extra: { default: def, ...(multiline ? { multiline: true, dynamicPrompts: true } : {}) },
});
const boolean = (def: boolean): Input => ({ kind: 'type', type: 'BOOLEAN', extra: { default: def } });
const combo = (options: readonly (string | number)[], extra: Record<string, unknown> = {}): Input => ({
  kind: 'combo',
  options,
  extra,
});
const files = (folder: ModelFolder): Input => ({ kind: 'files', folder, extra: {} });

const SAMPLERS = [
  'euler',
  'euler_cfg_pp',
  'euler_ancestral',
  'euler_ancestral_cfg_pp',
  'heun',
  'heunpp2',
  'dpm_2',
  'dpm_2_ancestral',
  'lms',
  'dpm_fast',
  'dpm_adaptive',
  'dpmpp_2s_ancestral',
  'dpmpp_2s_ancestral_cfg_pp',
  'dpmpp_sde',
  'dpmpp_sde_gpu',
  'dpmpp_2m',
  'dpmpp_2m_cfg_pp',
  'dpmpp_2m_sde',
  'dpmpp_2m_sde_gpu',
  'dpmpp_3m_sde',
  'dpmpp_3m_sde_gpu',
  'ddpm',
  'lcm',
  'ipndm',
  'ipndm_v',
  'deis',
  'res_multistep',
  'res_multistep_cfg_pp',
  'res_multistep_ancestral',
  'res_multistep_ancestral_cfg_pp',
  'gradient_estimation',
  'er_sde',
  'seeds_2',
  'seeds_3',
  'sa_solver',
  'sa_solver_pece',
  'ddim',
  'uni_pc',
  'uni_pc_bh2',
];
const SCHEDULERS = [
  'simple',
  'sgm_uniform',
  'karras',
  'exponential',
  'ddim_uniform',
  'beta',
  'normal',
  'linear_quadratic',
  'kl_optimal',
];
const CLIP_TYPES = [
  'stable_diffusion',
  'stable_cascade',
  'sd3',
  'stable_audio',
  'mochi',
  'ltxv',
  'pixart',
  'cosmos',
  'lumina2',
  'wan',
  'hidream',
  'chroma',
  'ace',
  'omnigen2',
  'qwen_image',
  'hunyuan_image',
  'flux2',
  'ovis',
];

const sampling = {
  seed: int(0, 0, MAX_SEED),
  steps: int(20, 1, 10000),
  cfg: float(8, 0, 100, 0.1),
  sampler_name: combo(SAMPLERS),
  scheduler: combo(SCHEDULERS),
};
const conditioningPair = { positive: link('CONDITIONING'), negative: link('CONDITIONING') };
const videoSize = (lengthDefault: number, lengthMin: number, lengthStep: number) => ({
  width: int(832, 16, MAX_RESOLUTION, 16),
  height: int(480, 16, MAX_RESOLUTION, 16),
  length: int(lengthDefault, lengthMin, MAX_RESOLUTION, lengthStep),
  batch_size: int(1, 1, 4096),
});

export const NODE_CLASSES: Record<string, NodeClass> = {
  CheckpointLoaderSimple: {
    category: 'loaders',
    required: { ckpt_name: files('checkpoints') },
    outputs: ['MODEL', 'CLIP', 'VAE'],
  },
  UNETLoader: {
    category: 'advanced/loaders',
    required: {
      unet_name: files('diffusion_models'),
      weight_dtype: combo(['default', 'fp8_e4m3fn', 'fp8_e4m3fn_fast', 'fp8_e5m2']),
    },
    outputs: ['MODEL'],
  },
  CLIPLoader: {
    category: 'advanced/loaders',
    required: { clip_name: files('text_encoders'), type: combo(CLIP_TYPES) },
    optional: { device: combo(['default', 'cpu'], { advanced: true }) },
    outputs: ['CLIP'],
  },
  VAELoader: { category: 'loaders', required: { vae_name: files('vae') }, outputs: ['VAE'] },
  LoraLoader: {
    category: 'loaders',
    required: {
      model: link('MODEL'),
      clip: link('CLIP'),
      lora_name: files('loras'),
      strength_model: float(1, -100, 100),
      strength_clip: float(1, -100, 100),
    },
    outputs: ['MODEL', 'CLIP'],
  },
  CLIPVisionLoader: {
    category: 'loaders',
    required: { clip_name: files('clip_vision') },
    outputs: ['CLIP_VISION'],
  },
  CLIPVisionEncode: {
    category: 'conditioning',
    required: { clip_vision: link('CLIP_VISION'), image: link('IMAGE'), crop: combo(['center', 'none']) },
    outputs: ['CLIP_VISION_OUTPUT'],
  },
  CLIPTextEncode: {
    category: 'conditioning',
    required: { text: string('', true), clip: link('CLIP') },
    outputs: ['CONDITIONING'],
  },
  LoadImage: {
    category: 'image',
    required: { image: { kind: 'input-image', extra: { image_upload: true } } },
    outputs: ['IMAGE', 'MASK'],
    customValidation: ['image'],
  },
  EmptyLatentImage: {
    category: 'latent',
    required: {
      width: int(512, 16, MAX_RESOLUTION, 8),
      height: int(512, 16, MAX_RESOLUTION, 8),
      batch_size: int(1, 1, 4096),
    },
    outputs: ['LATENT'],
  },
  KSampler: {
    category: 'sampling',
    required: {
      model: link('MODEL'),
      ...sampling,
      ...conditioningPair,
      latent_image: link('LATENT'),
      denoise: float(1, 0, 1),
    },
    outputs: ['LATENT'],
  },
  KSamplerAdvanced: {
    category: 'sampling',
    required: {
      model: link('MODEL'),
      add_noise: combo(['enable', 'disable']),
      noise_seed: int(0, 0, MAX_SEED),
      steps: sampling.steps,
      cfg: sampling.cfg,
      sampler_name: sampling.sampler_name,
      scheduler: sampling.scheduler,
      ...conditioningPair,
      latent_image: link('LATENT'),
      start_at_step: int(0, 0, 10000),
      end_at_step: int(10000, 0, 10000),
      return_with_leftover_noise: combo(['disable', 'enable']),
    },
    outputs: ['LATENT'],
  },
  ModelSamplingSD3: {
    category: 'advanced/model',
    required: { model: link('MODEL'), shift: float(3, 0, 100) },
    outputs: ['MODEL'],
  },
  VAEDecode: {
    category: 'latent',
    required: { samples: link('LATENT'), vae: link('VAE') },
    outputs: ['IMAGE'],
  },
  VAEEncode: {
    category: 'latent',
    required: { pixels: link('IMAGE'), vae: link('VAE') },
    outputs: ['LATENT'],
  },
  SaveImage: {
    category: 'image',
    required: { images: link('IMAGE'), filename_prefix: string('ComfyUI') },
    outputs: [],
    output: true,
  },
  PreviewImage: { category: 'image', required: { images: link('IMAGE') }, outputs: [], output: true },
  SaveWEBM: {
    category: 'video',
    required: {
      images: link('IMAGE'),
      filename_prefix: string('ComfyUI'),
      codec: combo(['vp9', 'av1']),
      fps: float(24, 0.01, 1000),
      crf: float(32, 0, 63, 1),
    },
    outputs: ['IMAGE'],
    output: true,
  },
  CreateVideo: {
    category: 'video',
    required: { images: link('IMAGE'), fps: float(30, 1, 120, 1) },
    optional: { audio: link('AUDIO') },
    outputs: ['VIDEO'],
  },
  SaveVideo: {
    category: 'video',
    required: {
      video: link('VIDEO'),
      filename_prefix: string('video/ComfyUI'),
      format: combo(['auto', 'mp4', 'mkv', 'webm']),
    },
    optional: { codec: combo(['auto', 'h264', 'av1']) },
    outputs: ['VIDEO'],
    output: true,
  },
  VHS_VideoCombine: {
    category: 'Video Helper Suite 🎥🅥🅗🅢',
    required: {
      images: link('IMAGE'),
      frame_rate: float(8, 1, 1000),
      loop_count: int(0, 0, 100),
      filename_prefix: string('AnimateDiff'),
      format: combo(['image/gif', 'image/webp', 'video/webm', 'video/h264-mp4']),
      pingpong: boolean(false),
      save_output: boolean(true),
    },
    outputs: ['VHS_FILENAMES'],
    outputNames: ['Filenames'],
    output: true,
  },
  LTXVImgToVideo: {
    category: 'conditioning/video_models',
    required: {
      ...conditioningPair,
      vae: link('VAE'),
      image: link('IMAGE'),
      width: int(768, 64, MAX_RESOLUTION, 32),
      height: int(512, 64, MAX_RESOLUTION, 32),
      length: int(97, 9, MAX_RESOLUTION, 8),
      batch_size: int(1, 1, 4096),
    },
    optional: { strength: float(1, 0, 1) },
    outputs: ['CONDITIONING', 'CONDITIONING', 'LATENT'],
    outputNames: ['positive', 'negative', 'latent'],
  },
  LTXVAddGuide: {
    category: 'conditioning/video_models',
    required: {
      ...conditioningPair,
      vae: link('VAE'),
      latent: link('LATENT'),
      image: link('IMAGE'),
      frame_idx: int(0, -9999, 9999),
      strength: float(1, 0, 1),
    },
    outputs: ['CONDITIONING', 'CONDITIONING', 'LATENT'],
    outputNames: ['positive', 'negative', 'latent'],
  },
  LTXVConditioning: {
    category: 'conditioning/video_models',
    required: { ...conditioningPair, frame_rate: float(25, 0, 1000) },
    outputs: ['CONDITIONING', 'CONDITIONING'],
    outputNames: ['positive', 'negative'],
  },
  LTXVCropGuides: {
    category: 'conditioning/video_models',
    required: { ...conditioningPair, latent: link('LATENT') },
    outputs: ['CONDITIONING', 'CONDITIONING', 'LATENT'],
    outputNames: ['positive', 'negative', 'latent'],
  },
  EmptyLTXVLatentVideo: {
    category: 'latent/video/ltxv',
    required: {
      width: int(768, 64, MAX_RESOLUTION, 32),
      height: int(512, 64, MAX_RESOLUTION, 32),
      length: int(97, 1, MAX_RESOLUTION, 8),
      batch_size: int(1, 1, 4096),
    },
    outputs: ['LATENT'],
  },
  WanFirstLastFrameToVideo: {
    category: 'conditioning/video_models',
    required: { ...conditioningPair, vae: link('VAE'), ...videoSize(81, 1, 4) },
    optional: {
      clip_vision_start_image: link('CLIP_VISION_OUTPUT'),
      clip_vision_end_image: link('CLIP_VISION_OUTPUT'),
      start_image: link('IMAGE'),
      end_image: link('IMAGE'),
    },
    outputs: ['CONDITIONING', 'CONDITIONING', 'LATENT'],
    outputNames: ['positive', 'negative', 'latent'],
  },
  WanImageToVideo: {
    category: 'conditioning/video_models',
    required: { ...conditioningPair, vae: link('VAE'), ...videoSize(81, 1, 4) },
    optional: { clip_vision_output: link('CLIP_VISION_OUTPUT'), start_image: link('IMAGE') },
    outputs: ['CONDITIONING', 'CONDITIONING', 'LATENT'],
    outputNames: ['positive', 'negative', 'latent'],
  },
  Wan22ImageToVideoLatent: {
    category: 'conditioning/inpaint',
    required: {
      vae: link('VAE'),
      width: int(1280, 32, MAX_RESOLUTION, 32),
      height: int(704, 32, MAX_RESOLUTION, 32),
      length: int(49, 1, MAX_RESOLUTION, 4),
      batch_size: int(1, 1, 4096),
    },
    optional: { start_image: link('IMAGE') },
    outputs: ['LATENT'],
  },
  EmptyHunyuanLatentVideo: {
    category: 'latent/video',
    required: videoSize(25, 1, 4),
    outputs: ['LATENT'],
  },
};

/** Node classes whose execution reports sampler progress. */
export const SAMPLER_CLASSES = new Set(['KSampler', 'KSamplerAdvanced']);

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
        const type = input.kind === 'type' ? input.type : [...(options ?? [])];
        return [key, Object.keys(input.extra).length > 0 ? [type, input.extra] : [type]];
      }),
    );
  const input: Record<string, unknown> = { required: describe(node.required) };
  const order: Record<string, string[]> = { required: Object.keys(node.required) };
  if (node.optional) {
    input.optional = describe(node.optional);
    order.optional = Object.keys(node.optional);
  }
  return {
    input,
    input_order: order,
    is_input_list: false,
    output: node.outputs,
    output_is_list: node.outputs.map(() => false),
    output_name: node.outputNames ?? node.outputs,
    name,
    display_name: name,
    description: '',
    python_module: name.startsWith('VHS_') ? 'custom_nodes.ComfyUI-VideoHelperSuite' : 'nodes',
    category: node.category,
    output_node: node.output === true,
    has_intermediate_output: false,
    search_aliases: [],
  };
}
