import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  contextFromModels,
  contextFromProps,
  isContextLengthError,
  probeFromMetrics,
  tokenCount,
  visionFromProps,
} from '../../src/engines/openai/discovery.js';
import { REPO_ROOT } from '../helpers/process.js';

/** The captures of a real llama.cpp server in ../shared/reference/recordings (see its README). */
const recording = (name: string) =>
  readFileSync(path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'llamacpp', name), 'utf8');
const answer = (name: string) => JSON.parse(recording(name)).response.body;

describe('what engines say about themselves, read from recordings of a real llama.cpp', () => {
  it('load and a lifetime counter from /metrics', () => {
    const probe = probeFromMetrics(recording('get-metrics.txt'));
    expect(probe.load).toBe(0); // requests_processing 0 + requests_deferred 0
    expect(probe.lifetimeCounter).toBe(473); // llamacpp:prompt_tokens_total
    expect(probe.kvCapacityTokens).toBeUndefined();
  });

  it('the per-slot context size from /props and /v1/models', () => {
    expect(contextFromProps(answer('get-props.json'))).toBe(4096);
    expect(contextFromModels(answer('get-v1-models.json'), 'tiny')).toBe(4096);
  });

  it('whether the model reads images from /props (the recorded model has no projector)', () => {
    const props = answer('get-props.json');
    expect(visionFromProps(props)).toBe(false);
    expect(visionFromProps({ ...props, modalities: { ...props.modalities, vision: true } })).toBe(true);
    // vLLM and SGLang serve no /props: nothing is said.
    expect(visionFromProps(undefined)).toBeUndefined();
    expect(visionFromProps({ modalities: {} })).toBeUndefined();
  });

  it('token counts from /tokenize, and the context-length refusal', () => {
    const tokenize = JSON.parse(recording('post-tokenize.json'));
    expect(tokenCount(tokenize.plain.response.body)).toBe(22);
    const refusal = JSON.parse(recording('error-context-exceeded.json'));
    expect(isContextLengthError(JSON.stringify(refusal.context_exceeded_sync.response.body))).toBe(true);
    const bad = JSON.parse(recording('error-bad-request.json'));
    for (const exchange of Object.values(bad) as { response: { body: unknown } }[]) {
      expect(isContextLengthError(JSON.stringify(exchange.response.body))).toBe(false);
    }
  });

  it('vLLM’s metric names: load, KV capacity from cache_config_info, a lifetime counter', () => {
    const text = [
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{model_name="m"} 3.0',
      'vllm:num_requests_waiting{model_name="m"} 2.0',
      'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2750"} 1.0',
      'vllm:prefix_cache_queries_total{model_name="m"} 12345.0',
    ].join('\n');
    expect(probeFromMetrics(text)).toEqual({ load: 5, kvCapacityTokens: 44_000, lifetimeCounter: 12_345 });
    expect(
      isContextLengthError(
        "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens",
      ),
    ).toBe(true);
  });
});
