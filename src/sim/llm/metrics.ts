import type { SimStats } from './engine.js';
import type { FlavorName } from './flavor.js';

interface Metric {
  name: string;
  type: 'counter' | 'gauge';
  help: string;
  value: number;
  labels?: Record<string, string>;
}

/** What the engines' series describe beside the running figures. */
export interface MetricsInfo {
  model: string;
  blockTokens: number;
  kvBlocks: number;
  decodeMsPerToken: number;
}

/** Prometheus label values escape backslash, double quote and newline. */
const labelValue = (value: string) =>
  value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n');

function series(m: Metric): string {
  const labels = Object.entries(m.labels ?? {});
  const set = labels.length === 0 ? '' : `{${labels.map(([k, v]) => `${k}="${labelValue(v)}"`).join(',')}}`;
  return `# HELP ${m.name} ${m.help}\n# TYPE ${m.name} ${m.type}\n${m.name}${set} ${m.value}\n`;
}

/** The simulator's own series, in blocks where they count blocks. */
const kilnMetrics = (stats: SimStats): Metric[] => [
  {
    name: 'kiln_sim_requests_total',
    type: 'counter',
    help: 'Chat completion requests accepted by the engine (queued, running or finished).',
    value: stats.requests,
  },
  {
    name: 'kiln_sim_requests_running',
    type: 'gauge',
    help: 'Requests holding a sequence slot (in prefill or decode).',
    value: stats.running,
  },
  {
    name: 'kiln_sim_requests_waiting',
    type: 'gauge',
    help: 'Requests queued for a sequence slot.',
    value: stats.waiting,
  },
  {
    name: 'kiln_sim_prefix_cache_hits_total',
    type: 'counter',
    help: 'Prompt KV blocks found in the prefix cache, counted in blocks.',
    value: stats.prefixHits,
  },
  {
    name: 'kiln_sim_prefix_cache_misses_total',
    type: 'counter',
    help: 'Full prompt KV blocks not in the prefix cache and computed, counted in blocks.',
    value: stats.prefixMisses,
  },
  {
    name: 'kiln_sim_prefix_cache_blocks',
    type: 'gauge',
    help: 'KV blocks held in the prefix cache.',
    value: stats.cachedBlocks,
  },
  {
    name: 'kiln_sim_prompt_tokens_total',
    type: 'counter',
    help: 'Prompt tokens of admitted requests, cached ones included.',
    value: stats.promptTokens,
  },
  {
    name: 'kiln_sim_generation_tokens_total',
    type: 'counter',
    help: 'Output tokens generated.',
    value: stats.generationTokens,
  },
];

/**
 * The series a router reads from a real vLLM (V1) under the same names, help and units; as in
 * vLLM, each carries the served model as `model_name`.
 */
function vllmMetrics(stats: SimStats, info: MetricsInfo): Metric[] {
  const model_name = info.model;
  return [
    {
      name: 'vllm:num_requests_running',
      type: 'gauge',
      help: 'Number of requests in model execution batches.',
      value: stats.running,
      labels: { model_name },
    },
    {
      name: 'vllm:num_requests_waiting',
      type: 'gauge',
      help: 'Number of requests waiting to be processed.',
      value: stats.waiting,
      labels: { model_name },
    },
    {
      name: 'vllm:gpu_cache_usage_perc',
      type: 'gauge',
      help: 'GPU KV-cache usage. 1 means 100 percent usage.',
      value: info.kvBlocks === 0 ? 0 : stats.cachedBlocks / info.kvBlocks,
      labels: { model_name },
    },
    {
      name: 'vllm:prefix_cache_queries_total',
      type: 'counter',
      help: 'Prefix cache queries, in terms of number of queried tokens.',
      value: stats.prefixQueryTokens,
      labels: { model_name },
    },
    {
      name: 'vllm:prefix_cache_hits_total',
      type: 'counter',
      help: 'Prefix cache hits, in terms of number of cached tokens.',
      value: stats.prefixHitTokens,
      labels: { model_name },
    },
    {
      name: 'vllm:cache_config_info',
      type: 'gauge',
      help: 'Information of the LLMEngine CacheConfig',
      value: 1,
      labels: { block_size: String(info.blockTokens), num_gpu_blocks: String(info.kvBlocks), model_name },
    },
  ];
}

/**
 * The series llama-server exposes with `--metrics`, under its names and help texts (unlabelled, as
 * it has them). Times are the modelled ones; `n_decode_total` counts decode steps per request
 * (llama.cpp batches the slots into one call), and `n_busy_slots_per_decode` is the choices
 * decoded per step.
 */
function llamaMetrics(stats: SimStats, info: MetricsInfo): Metric[] {
  const promptProcessed = stats.prefixQueryTokens - stats.prefixHitTokens;
  const promptSeconds = stats.prefillMs / 1000;
  const decodeSeconds = (stats.decodeSteps * info.decodeMsPerToken) / 1000;
  const rate = (tokens: number, seconds: number) => (seconds > 0 ? tokens / seconds : 0);
  const metric = (name: string, type: Metric['type'], help: string, value: number): Metric => ({
    name: `llamacpp:${name}`,
    type,
    help,
    value,
  });
  return [
    metric(
      'prompt_tokens_total',
      'counter',
      'Number of prompt tokens processed, excluding cached tokens',
      promptProcessed,
    ),
    metric(
      'prompt_tokens_cached_total',
      'counter',
      'Number of prompt tokens reused from the cache',
      stats.prefixHitTokens,
    ),
    metric('prompt_seconds_total', 'counter', 'Total time spent processing prompts', promptSeconds),
    metric(
      'tokens_predicted_total',
      'counter',
      'Number of generation tokens processed',
      stats.generationTokens,
    ),
    metric('tokens_predicted_seconds_total', 'counter', 'Total time spent generating tokens', decodeSeconds),
    metric(
      'n_decode_total',
      'counter',
      'Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding',
      stats.decodeSteps,
    ),
    metric(
      'n_tokens_max',
      'counter',
      'Largest observed sequence length (prompt + generation)',
      stats.longestSequence,
    ),
    metric('spec_decode_num_draft_tokens_total', 'counter', 'Speculative: Total draft tokens generated', 0),
    metric(
      'spec_decode_num_accepted_tokens_total',
      'counter',
      'Speculative: Total draft tokens accepted by the target model',
      0,
    ),
    metric(
      'spec_decode_num_drafts_total',
      'counter',
      'Speculative: Total speculative decoding verification steps',
      0,
    ),
    metric(
      'prompt_tokens_seconds',
      'gauge',
      'Average prompt throughput in tokens/s',
      rate(promptProcessed, promptSeconds),
    ),
    metric(
      'predicted_tokens_seconds',
      'gauge',
      'Average generation throughput in tokens/s',
      rate(stats.generationTokens, decodeSeconds),
    ),
    metric('requests_processing', 'gauge', 'Number of requests processing', stats.running),
    metric('requests_deferred', 'gauge', 'Number of requests deferred', stats.waiting),
    metric(
      'n_busy_slots_per_decode',
      'gauge',
      'Average number of busy slots per llama_decode() call',
      stats.decodeSteps > 0 ? stats.generationTokens / stats.decodeSteps : 0,
    ),
  ];
}

/** The simulator's /metrics in the Prometheus text exposition format (version 0.0.4). */
export function renderMetrics(stats: SimStats, info: MetricsInfo, engine: FlavorName): string {
  const own = engine === 'vllm' ? vllmMetrics(stats, info) : llamaMetrics(stats, info);
  return [...kilnMetrics(stats), ...own].map(series).join('');
}
