import type { Flavor, FlavorRoute, ReplicaInfo, SlotView } from './flavor.js';
import { renderMetrics } from './metrics.js';
import { llamaTokenize } from './tokenize.js';

/**
 * llama-server's routes beside chat completions, in the shapes captured from build b11669:
 * `/health`, `/v1/models` (with the Ollama-style `models` list), `/props`, `/slots`, `/metrics`
 * and `/tokenize`. Values come from the simulator's settings: `n_ctx` is the context window (per
 * slot, as llama-server's `-c` divided by `-np`), `total_slots` is `maxSequences`.
 */

/** The build a llama.cpp flavored simulator claims to be (`system_fingerprint`, `build_info`). */
export const LLAMA_BUILD = 'b11669-kiln-sim';

/**
 * The simulator's chat template (text.ts renderChatPrompt, with an assistant message's tool calls
 * as protocol.ts parseMessages writes them) in the Jinja llama.cpp shows.
 */
const CHAT_TEMPLATE =
  "{%- for message in messages %}{{- '<|' + message.role + '|>' + (message.content or '') }}" +
  '{%- for tool_call in message.tool_calls or [] %}{{- \'<tool_call>{"name": \' + tool_call.function.name | tojson' +
  " + ', \"arguments\": ' + tool_call.function.arguments + '}</tool_call>' }}{%- endfor %}{{- '\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}";

/** A slot's sampling parameters, llama-server's defaults with the request's stream and n_predict. */
function params(nPredict: number, stream: boolean) {
  return {
    seed: 4294967295,
    temperature: 0.800000011920929,
    dynatemp_range: 0,
    dynatemp_exponent: 1,
    top_k: 40,
    top_p: 0.949999988079071,
    min_p: 0.05000000074505806,
    top_n_sigma: -1,
    xtc_probability: 0,
    xtc_threshold: 0.10000000149011612,
    typical_p: 1,
    repeat_last_n: 64,
    repeat_penalty: 1,
    presence_penalty: 0,
    frequency_penalty: 0,
    dry_multiplier: 0,
    dry_base: 1.75,
    dry_allowed_length: 2,
    dry_penalty_last_n: 64,
    mirostat: 0,
    mirostat_tau: 5,
    mirostat_eta: 0.10000000149011612,
    adaptive_target: -1,
    adaptive_decay: 0.8999999761581421,
    max_tokens: nPredict,
    n_predict: nPredict,
    n_keep: 0,
    n_discard: 0,
    ignore_eos: false,
    stream,
    n_probs: 0,
    min_keep: 0,
    chat_format: 'Content-only',
    reasoning_format: 'none',
    reasoning_in_content: false,
    generation_prompt: '',
    samplers: ['penalties', 'dry', 'top_n_sigma', 'top_k', 'typ_p', 'top_p', 'min_p', 'xtc', 'temperature'],
    'speculative.types': 'none',
    timings_per_token: false,
    post_sampling_probs: false,
    backend_sampling: false,
    lora: [],
  };
}

function props(replica: ReplicaInfo) {
  return {
    default_generation_settings: { params: params(-1, false), n_ctx: replica.contextWindow },
    total_slots: replica.maxSequences,
    model_alias: replica.model,
    model_ftype: 'Q4_K - Medium',
    model_path: `/models/${replica.model}.gguf`,
    modalities: { vision: replica.vision, video: false, audio: false },
    media_marker: '<__media__>',
    endpoint_slots: true,
    endpoint_props: false,
    endpoint_metrics: true,
    ui: false,
    ui_settings: {},
    chat_template: CHAT_TEMPLATE,
    chat_template_caps: {
      supports_object_arguments: false,
      supports_parallel_tool_calls: true,
      supports_preserve_reasoning: false,
      supports_reasoning_effort: false,
      supports_string_content: true,
      supports_system_role: true,
      supports_tool_calls: true,
      supports_tools: false,
      supports_typed_content: false,
    },
    bos_token: '<|begin_of_text|>',
    eos_token: '<|eot_id|>',
    build_info: LLAMA_BUILD,
    is_sleeping: false,
    cors_proxy_enabled: false,
  };
}

function models(replica: ReplicaInfo) {
  const id = replica.model;
  return {
    models: [
      {
        name: id,
        model: id,
        modified_at: '',
        size: '',
        digest: '',
        type: 'model',
        description: '',
        tags: [''],
        capabilities: ['completion'],
        parameters: '',
        details: {
          parent_model: '',
          format: 'gguf',
          family: '',
          families: [''],
          parameter_size: '',
          quantization_level: '',
        },
      },
    ],
    object: 'list',
    data: [
      {
        id,
        aliases: [id],
        tags: [],
        object: 'model',
        architecture: { input_modalities: ['text'], output_modalities: ['text'] },
        created: Math.floor(Date.now() / 1000),
        owned_by: 'llamacpp',
        meta: {
          vocab_type: 2,
          n_vocab: 128_000,
          n_ctx: replica.contextWindow,
          n_ctx_train: Math.max(replica.contextWindow, 8192),
          n_embd: 4096,
          n_params: 8_030_261_248,
          size: 4_920_734_464,
          ftype: 'Q4_K - Medium',
        },
      },
    ],
  };
}

const slot = (view: SlotView, nCtx: number) => ({
  id: view.id,
  n_ctx: nCtx,
  speculative: false,
  is_processing: view.processing,
  id_task: view.taskId,
  n_prompt_tokens: view.promptTokens,
  n_prompt_tokens_processed: view.promptProcessed,
  n_prompt_tokens_cache: view.promptCached,
  params: params(view.taskId < 0 ? -1 : view.outputTokens, view.stream),
  next_token: [
    {
      has_next_token: view.processing,
      has_new_line: false,
      n_remain: view.processing ? view.outputTokens - view.decoded : -1,
      n_decoded: view.decoded,
    },
  ],
});

/** The routes, their errors worded by the flavor (passed lazily: it holds these routes). */
export function llamaRoutes(flavor: () => Flavor): Record<string, FlavorRoute> {
  const health: FlavorRoute = { method: 'GET', answer: () => ({ status: 200, json: { status: 'ok' } }) };
  const listModels: FlavorRoute = {
    method: 'GET',
    answer: (_b, replica) => ({ status: 200, json: models(replica) }),
  };
  return {
    '/health': health,
    '/v1/health': health,
    '/v1/models': listModels,
    '/models': listModels,
    '/props': { method: 'GET', answer: (_b, replica) => ({ status: 200, json: props(replica) }) },
    '/slots': {
      method: 'GET',
      answer: (_b, replica) => ({
        status: 200,
        json: replica.slots().map((view) => slot(view, replica.contextWindow)),
      }),
    },
    '/metrics': {
      method: 'GET',
      answer: (_b, replica) => ({
        status: 200,
        contentType: 'text/plain; version=0.0.4',
        text: renderMetrics(replica.stats(), replica, 'llama.cpp'),
      }),
    },
    '/tokenize': { method: 'POST', readsBody: true, answer: (body) => llamaTokenize(body, flavor()) },
  };
}
