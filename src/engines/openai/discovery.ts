/**
 * What OpenAI-compatible engines say about themselves, for routing: load and KV capacity from
 * their Prometheus metrics, context size from /v1/models or /props, exact token counts from
 * /tokenize. Pure parsers here; the adapter does the HTTP.
 */
import type { EngineProbe } from '../types.js';

/** One sample of a Prometheus text exposition: name, labels and value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(LABEL)) labels[key as string] = value as string;
    const value = Number(match[3]);
    if (Number.isFinite(value)) samples.push({ name: match[1] as string, labels, value });
  }
  return samples;
}

/** Sums every sample of the first of `names` that the engine exposes (engines label per model). */
function total(samples: readonly Sample[], names: readonly string[]): number | undefined {
  for (const name of names) {
    const found = samples.filter((s) => s.name === name);
    if (found.length > 0) return found.reduce((sum, s) => sum + s.value, 0);
  }
  return undefined;
}

/** vLLM, SGLang and llama.cpp metric names for the same facts. */
const RUNNING = ['vllm:num_requests_running', 'sglang:num_running_reqs', 'llamacpp:requests_processing'];
const WAITING = ['vllm:num_requests_waiting', 'sglang:num_queue_reqs', 'llamacpp:requests_deferred'];
/** Counters that only grow while the engine lives: one going down means it restarted. */
const LIFETIME = [
  'vllm:prefix_cache_queries_total',
  'vllm:prompt_tokens_total',
  'sglang:prompt_tokens_total',
  'llamacpp:prompt_tokens_total',
];

/** Load, KV capacity and a lifetime counter from an engine's /metrics text. */
export function probeFromMetrics(text: string): EngineProbe {
  const samples = parsePrometheus(text);
  const probe: EngineProbe = {};
  const running = total(samples, RUNNING);
  const waiting = total(samples, WAITING);
  if (running !== undefined || waiting !== undefined) probe.load = (running ?? 0) + (waiting ?? 0);
  // vLLM: cache_config_info carries the block count and size as labels.
  const config = samples.find((s) => s.name === 'vllm:cache_config_info');
  const blocks = Number(config?.labels.num_gpu_blocks);
  const blockSize = Number(config?.labels.block_size);
  if (blocks > 0 && blockSize > 0) probe.kvCapacityTokens = blocks * blockSize;
  const sglangTokens = total(samples, ['sglang:max_total_num_tokens']);
  if (probe.kvCapacityTokens === undefined && sglangTokens) probe.kvCapacityTokens = sglangTokens;
  const lifetime = total(samples, LIFETIME);
  if (lifetime !== undefined) probe.lifetimeCounter = lifetime;
  return probe;
}

/**
 * The context size for `model` from /v1/models (vLLM's `max_model_len`, llama.cpp's `meta.n_ctx`,
 * which is per slot) or from llama.cpp's /props (`default_generation_settings.n_ctx`).
 */
export function contextFromModels(body: unknown, model: string): number | undefined {
  const data = (body as { data?: unknown })?.data;
  if (!Array.isArray(data)) return undefined;
  const entry = (data.find((m) => (m as { id?: unknown })?.id === model) ??
    (data.length === 1 ? data[0] : undefined)) as
    | { max_model_len?: unknown; meta?: { n_ctx?: unknown } }
    | undefined;
  const size = entry?.max_model_len ?? entry?.meta?.n_ctx;
  return typeof size === 'number' && size > 0 ? size : undefined;
}

export function contextFromProps(body: unknown): number | undefined {
  const size = (body as { default_generation_settings?: { n_ctx?: unknown } })?.default_generation_settings
    ?.n_ctx;
  return typeof size === 'number' && size > 0 ? size : undefined;
}

/** Whether llama.cpp's /props says the model reads images (`modalities.vision`, from its projector). */
export function visionFromProps(body: unknown): boolean | undefined {
  const vision = (body as { modalities?: { vision?: unknown } })?.modalities?.vision;
  return typeof vision === 'boolean' ? vision : undefined;
}

/** The token count in a /tokenize answer: vLLM and SGLang give `count`, llama.cpp only `tokens`. */
export function tokenCount(body: unknown): number | undefined {
  const { count, tokens } = (body ?? {}) as { count?: unknown; tokens?: unknown };
  if (typeof count === 'number' && count >= 0) return count;
  return Array.isArray(tokens) ? tokens.length : undefined;
}

/**
 * Whether an engine's 4xx says the prompt does not fit its context: vLLM ("maximum context length"),
 * SGLang ("longer than the model's context length"), llama.cpp (`exceed_context_size_error`).
 */
export function isContextLengthError(text: string): boolean {
  return /exceed_context_size|context[ _-]length|maximum context|context size|context window/i.test(text);
}
