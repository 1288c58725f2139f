import {
  boolean,
  combo,
  files,
  float,
  type Input,
  int,
  link,
  MAX_RESOLUTION,
  MAX_SEED,
  type NodeClass,
  string,
} from './nodes.js';

/**
 * The node classes the simulated runner knows. The 18 classes of Kiln's templates are written as
 * ComfyUI 0.3.64 shows them in `GET /object_info/<class>` (tooltips, display names, descriptions,
 * the v3 nodes' shapes), so validation errors carry the same `input_config`; the others as their
 * nodes declare them. A class_type not listed here is a custom node that is not installed
 * (`missing_node_type`).
 */

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
  'dpmpp_2m_sde_heun',
  'dpmpp_2m_sde_heun_gpu',
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
  'gradient_estimation_cfg_pp',
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
];
const CLIP_RECIPES =
  '[Recipes]\n\nstable_diffusion: clip-l\nstable_cascade: clip-g\nsd3: t5 xxl/ clip-g / clip-l\n' +
  'stable_audio: t5 base\nmochi: t5 xxl\ncosmos: old t5 xxl\nlumina2: gemma 2 2B\nwan: umt5 xxl\n' +
  ' hidream: llama-3.1 (Recommend) or t5\nomnigen2: qwen vl 2.5 3B';

const tip = (tooltip: string) => ({ tooltip });
const seed = (extra: Record<string, unknown> = {}) =>
  int(0, 0, MAX_SEED, { control_after_generate: true, ...extra });
const cfg = (extra: Record<string, unknown> = {}) => float(8, 0, 100, { step: 0.1, round: 0.01, ...extra });
const SAVE_HIDDEN = { prompt: 'PROMPT', extra_pnginfo: 'EXTRA_PNGINFO' };
const conditioningPair = { positive: link('CONDITIONING'), negative: link('CONDITIONING') };
const GUIDED = ['CONDITIONING', 'CONDITIONING', 'LATENT'];
const GUIDED_NAMES = ['positive', 'negative', 'latent'];
const videoSize = (lengthDefault: number, lengthMin: number, lengthStep: number) => ({
  width: int(832, 16, MAX_RESOLUTION, { step: 16 }),
  height: int(480, 16, MAX_RESOLUTION, { step: 16 }),
  length: int(lengthDefault, lengthMin, MAX_RESOLUTION, { step: lengthStep }),
  batch_size: int(1, 1, 4096),
});
const LTXV = { pythonModule: 'comfy_extras.nodes_lt', displayName: null, v3: {} } as const;
const WAN = { pythonModule: 'comfy_extras.nodes_wan', displayName: null, v3: {} } as const;
const VIDEO = { pythonModule: 'comfy_extras.nodes_video', displayName: null } as const;

export const NODE_CLASSES: Record<string, NodeClass> = {
  CheckpointLoaderSimple: {
    category: 'loaders',
    displayName: 'Load Checkpoint',
    description: 'Loads a diffusion model checkpoint, diffusion models are used to denoise latents.',
    required: { ckpt_name: files('checkpoints', tip('The name of the checkpoint (model) to load.')) },
    outputs: ['MODEL', 'CLIP', 'VAE'],
    outputTooltips: [
      'The model used for denoising latents.',
      'The CLIP model used for encoding text prompts.',
      'The VAE model used for encoding and decoding images to and from latent space.',
    ],
  },
  UNETLoader: {
    category: 'advanced/loaders',
    displayName: 'Load Diffusion Model',
    required: {
      unet_name: files('diffusion_models'),
      weight_dtype: combo(['default', 'fp8_e4m3fn', 'fp8_e4m3fn_fast', 'fp8_e5m2']),
    },
    outputs: ['MODEL'],
  },
  CLIPLoader: {
    category: 'advanced/loaders',
    displayName: 'Load CLIP',
    description: CLIP_RECIPES,
    required: { clip_name: files('text_encoders'), type: combo(CLIP_TYPES) },
    optional: { device: combo(['default', 'cpu'], { advanced: true }) },
    outputs: ['CLIP'],
  },
  // ComfyUI lists "pixel_space" after the installed files (and taesd ones when present).
  VAELoader: {
    category: 'loaders',
    displayName: 'Load VAE',
    required: { vae_name: files('vae', {}, ['pixel_space']) },
    outputs: ['VAE'],
  },
  LoraLoader: {
    category: 'loaders',
    displayName: 'Load LoRA',
    required: {
      model: link('MODEL'),
      clip: link('CLIP'),
      lora_name: files('loras'),
      strength_model: float(1, -100, 100, { step: 0.01 }),
      strength_clip: float(1, -100, 100, { step: 0.01 }),
    },
    outputs: ['MODEL', 'CLIP'],
  },
  CLIPVisionLoader: {
    category: 'loaders',
    displayName: 'Load CLIP Vision',
    required: { clip_name: files('clip_vision') },
    outputs: ['CLIP_VISION'],
  },
  CLIPVisionEncode: {
    category: 'conditioning',
    displayName: 'CLIP Vision Encode',
    required: { clip_vision: link('CLIP_VISION'), image: link('IMAGE'), crop: combo(['center', 'none']) },
    outputs: ['CLIP_VISION_OUTPUT'],
  },
  CLIPTextEncode: {
    category: 'conditioning',
    displayName: 'CLIP Text Encode (Prompt)',
    description:
      'Encodes a text prompt using a CLIP model into an embedding that can be used to guide the diffusion model towards generating specific images.',
    required: {
      text: string({ multiline: true, dynamicPrompts: true, ...tip('The text to be encoded.') }),
      clip: link('CLIP', tip('The CLIP model used for encoding the text.')),
    },
    outputs: ['CONDITIONING'],
    outputTooltips: ['A conditioning containing the embedded text used to guide the diffusion model.'],
  },
  LoadImage: {
    category: 'image',
    displayName: 'Load Image',
    required: { image: { kind: 'input-image', extra: { image_upload: true } } },
    outputs: ['IMAGE', 'MASK'],
    customValidation: ['image'],
  },
  ImageScale: {
    category: 'image/upscaling',
    displayName: 'Upscale Image',
    required: {
      image: link('IMAGE'),
      upscale_method: combo(['nearest-exact', 'bilinear', 'area', 'bicubic', 'lanczos']),
      width: int(512, 0, MAX_RESOLUTION, { step: 1 }),
      height: int(512, 0, MAX_RESOLUTION, { step: 1 }),
      crop: combo(['disabled', 'center']),
    },
    outputs: ['IMAGE'],
  },
  RepeatImageBatch: {
    category: 'image/batch',
    pythonModule: 'comfy_extras.nodes_images',
    required: { image: link('IMAGE'), amount: int(1, 1, 4096) },
    outputs: ['IMAGE'],
  },
  ImageBlur: {
    category: 'image/postprocessing',
    displayName: 'Image Blur',
    pythonModule: 'comfy_extras.nodes_post_processing',
    required: {
      image: link('IMAGE'),
      blur_radius: int(1, 1, 31, { step: 1 }),
      sigma: float(1, 0.1, 10, { step: 0.1 }),
    },
    outputs: ['IMAGE'],
  },
  EmptyLatentImage: {
    category: 'latent',
    displayName: 'Empty Latent Image',
    description: 'Create a new batch of empty latent images to be denoised via sampling.',
    required: {
      width: int(512, 16, MAX_RESOLUTION, { step: 8, ...tip('The width of the latent images in pixels.') }),
      height: int(512, 16, MAX_RESOLUTION, {
        step: 8,
        ...tip('The height of the latent images in pixels.'),
      }),
      batch_size: int(1, 1, 4096, tip('The number of latent images in the batch.')),
    },
    outputs: ['LATENT'],
    outputTooltips: ['The empty latent image batch.'],
  },
  KSampler: {
    category: 'sampling',
    displayName: 'KSampler',
    description: 'Uses the provided model, positive and negative conditioning to denoise the latent image.',
    required: {
      model: link('MODEL', tip('The model used for denoising the input latent.')),
      seed: seed(tip('The random seed used for creating the noise.')),
      steps: int(20, 1, 10000, tip('The number of steps used in the denoising process.')),
      cfg: cfg(
        tip(
          'The Classifier-Free Guidance scale balances creativity and adherence to the prompt. Higher values result in images more closely matching the prompt however too high values will negatively impact quality.',
        ),
      ),
      sampler_name: combo(
        SAMPLERS,
        tip(
          'The algorithm used when sampling, this can affect the quality, speed, and style of the generated output.',
        ),
      ),
      scheduler: combo(
        SCHEDULERS,
        tip('The scheduler controls how noise is gradually removed to form the image.'),
      ),
      positive: link(
        'CONDITIONING',
        tip('The conditioning describing the attributes you want to include in the image.'),
      ),
      negative: link(
        'CONDITIONING',
        tip('The conditioning describing the attributes you want to exclude from the image.'),
      ),
      latent_image: link('LATENT', tip('The latent image to denoise.')),
      denoise: float(1, 0, 1, {
        step: 0.01,
        ...tip(
          'The amount of denoising applied, lower values will maintain the structure of the initial image allowing for image to image sampling.',
        ),
      }),
    },
    outputs: ['LATENT'],
    outputTooltips: ['The denoised latent.'],
  },
  KSamplerAdvanced: {
    category: 'sampling',
    displayName: 'KSampler (Advanced)',
    required: {
      model: link('MODEL'),
      add_noise: combo(['enable', 'disable']),
      noise_seed: seed(),
      steps: int(20, 1, 10000),
      cfg: cfg(),
      sampler_name: combo(SAMPLERS),
      scheduler: combo(SCHEDULERS),
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
    pythonModule: 'comfy_extras.nodes_model_advanced',
    required: { model: link('MODEL'), shift: float(3, 0, 100, { step: 0.01 }) },
    outputs: ['MODEL'],
  },
  VAEDecode: {
    category: 'latent',
    displayName: 'VAE Decode',
    description: 'Decodes latent images back into pixel space images.',
    required: {
      samples: link('LATENT', tip('The latent to be decoded.')),
      vae: link('VAE', tip('The VAE model used for decoding the latent.')),
    },
    outputs: ['IMAGE'],
    outputTooltips: ['The decoded image.'],
  },
  VAEEncode: {
    category: 'latent',
    displayName: 'VAE Encode',
    required: { pixels: link('IMAGE'), vae: link('VAE') },
    outputs: ['LATENT'],
  },
  SaveImage: {
    category: 'image',
    displayName: 'Save Image',
    description: 'Saves the input images to your ComfyUI output directory.',
    required: {
      images: link('IMAGE', tip('The images to save.')),
      filename_prefix: string({
        default: 'ComfyUI',
        ...tip(
          'The prefix for the file to save. This may include formatting information such as %date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from nodes.',
        ),
      }),
    },
    hidden: SAVE_HIDDEN,
    outputs: [],
    output: true,
  },
  PreviewImage: {
    category: 'image',
    displayName: 'Preview Image',
    description: 'Saves the input images to your ComfyUI output directory.',
    required: { images: link('IMAGE') },
    hidden: SAVE_HIDDEN,
    outputs: [],
    output: true,
  },
  SaveWEBM: {
    ...VIDEO,
    v3: { experimental: true },
    category: 'image/video',
    required: {
      images: link('IMAGE'),
      filename_prefix: string({ default: 'ComfyUI', multiline: false }),
      codec: combo(['vp9', 'av1']),
      fps: float(24, 0.01, 1000, { step: 0.01 }),
      crf: float(32, 0, 63, {
        step: 1,
        ...tip(
          'Higher crf means lower quality with a smaller file size, lower crf means higher quality higher filesize.',
        ),
      }),
    },
    hidden: SAVE_HIDDEN,
    outputs: [],
    output: true,
  },
  CreateVideo: {
    ...VIDEO,
    v3: {},
    category: 'image/video',
    required: { images: link('IMAGE'), fps: float(30, 1, 120, { step: 1 }) },
    optional: { audio: link('AUDIO') },
    outputs: ['VIDEO'],
  },
  SaveVideo: {
    ...VIDEO,
    v3: {},
    category: 'image/video',
    required: {
      video: link('VIDEO'),
      filename_prefix: string({ default: 'video/ComfyUI' }),
      format: combo(['auto', 'mp4', 'mkv', 'webm']),
    },
    optional: { codec: combo(['auto', 'h264', 'av1']) },
    hidden: SAVE_HIDDEN,
    outputs: [],
    output: true,
  },
  VHS_VideoCombine: {
    category: 'Video Helper Suite 🎥🅥🅗🅢',
    displayName: 'Video Combine 🎥🅥🅗🅢',
    pythonModule: 'custom_nodes.ComfyUI-VideoHelperSuite',
    required: {
      images: link('IMAGE'),
      frame_rate: float(8, 1, 1000, { step: 1 }),
      loop_count: int(0, 0, 100, { step: 1 }),
      filename_prefix: string({ default: 'AnimateDiff' }),
      format: combo(['image/gif', 'image/webp', 'video/webm', 'video/h264-mp4']),
      pingpong: boolean(false),
      save_output: boolean(true),
    },
    outputs: ['VHS_FILENAMES'],
    outputNames: ['Filenames'],
    output: true,
  },
  LTXVImgToVideo: {
    ...LTXV,
    category: 'conditioning/video_models',
    required: {
      ...conditioningPair,
      vae: link('VAE'),
      image: link('IMAGE'),
      width: int(768, 64, MAX_RESOLUTION, { step: 32 }),
      height: int(512, 64, MAX_RESOLUTION, { step: 32 }),
      length: int(97, 9, MAX_RESOLUTION, { step: 8 }),
      batch_size: int(1, 1, 4096),
      strength: float(1, 0, 1),
    },
    outputs: GUIDED,
    outputNames: GUIDED_NAMES,
  },
  LTXVAddGuide: {
    ...LTXV,
    category: 'conditioning/video_models',
    required: {
      ...conditioningPair,
      vae: link('VAE'),
      latent: link('LATENT'),
      image: link(
        'IMAGE',
        tip(
          'Image or video to condition the latent video on. Must be 8*n + 1 frames. If the video is not 8*n + 1 frames, it will be cropped to the nearest 8*n + 1 frames.',
        ),
      ),
      frame_idx: int(
        0,
        -9999,
        9999,
        tip(
          'Frame index to start the conditioning at. For single-frame images or videos with 1-8 frames, any frame_idx value is acceptable. For videos with 9+ frames, frame_idx must be divisible by 8, otherwise it will be rounded down to the nearest multiple of 8. Negative values are counted from the end of the video.',
        ),
      ),
      strength: float(1, 0, 1, { step: 0.01 }),
    },
    outputs: GUIDED,
    outputNames: GUIDED_NAMES,
  },
  LTXVConditioning: {
    ...LTXV,
    category: 'conditioning/video_models',
    required: { ...conditioningPair, frame_rate: float(25, 0, 1000, { step: 0.01 }) },
    outputs: ['CONDITIONING', 'CONDITIONING'],
    outputNames: ['positive', 'negative'],
  },
  LTXVCropGuides: {
    ...LTXV,
    category: 'conditioning/video_models',
    required: { ...conditioningPair, latent: link('LATENT') },
    outputs: GUIDED,
    outputNames: GUIDED_NAMES,
  },
  EmptyLTXVLatentVideo: {
    ...LTXV,
    category: 'latent/video/ltxv',
    required: {
      width: int(768, 64, MAX_RESOLUTION, { step: 32 }),
      height: int(512, 64, MAX_RESOLUTION, { step: 32 }),
      length: int(97, 1, MAX_RESOLUTION, { step: 8 }),
      batch_size: int(1, 1, 4096),
    },
    outputs: ['LATENT'],
  },
  WanFirstLastFrameToVideo: {
    ...WAN,
    category: 'conditioning/video_models',
    required: { ...conditioningPair, vae: link('VAE'), ...videoSize(81, 1, 4) },
    optional: {
      clip_vision_start_image: link('CLIP_VISION_OUTPUT'),
      clip_vision_end_image: link('CLIP_VISION_OUTPUT'),
      start_image: link('IMAGE'),
      end_image: link('IMAGE'),
    },
    outputs: GUIDED,
    outputNames: GUIDED_NAMES,
  },
  WanImageToVideo: {
    ...WAN,
    category: 'conditioning/video_models',
    required: { ...conditioningPair, vae: link('VAE'), ...videoSize(81, 1, 4) },
    optional: { clip_vision_output: link('CLIP_VISION_OUTPUT'), start_image: link('IMAGE') },
    outputs: GUIDED,
    outputNames: GUIDED_NAMES,
  },
  Wan22ImageToVideoLatent: {
    ...WAN,
    category: 'conditioning/inpaint',
    required: {
      vae: link('VAE'),
      width: int(1280, 32, MAX_RESOLUTION, { step: 32 }),
      height: int(704, 32, MAX_RESOLUTION, { step: 32 }),
      length: int(49, 1, MAX_RESOLUTION, { step: 4 }),
      batch_size: int(1, 1, 4096),
    },
    optional: { start_image: link('IMAGE') },
    outputs: ['LATENT'],
  },
  EmptyHunyuanLatentVideo: {
    category: 'latent/video',
    pythonModule: 'comfy_extras.nodes_hunyuan',
    required: videoSize(25, 1, 4),
    outputs: ['LATENT'],
  },
};

/** Node classes whose execution reports sampler progress, step by step (and can stop mid-node). */
export const SAMPLER_CLASSES = new Set(['KSampler', 'KSamplerAdvanced']);

/**
 * Node classes that take real time without reporting progress: ComfyUI notices an interrupt only
 * when such a node finishes (ImageBlur at 31 px took about 7 s a node on the recorded CPU).
 */
export const SLOW_CLASSES = new Set(['ImageBlur']);

/** Every input of a class, required first. */
export const inputsOf = (node: NodeClass): [string, Input][] => [
  ...Object.entries(node.required),
  ...Object.entries(node.optional ?? {}),
];
