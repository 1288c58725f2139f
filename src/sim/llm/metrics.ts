import type { SimStats } from './engine.js';

interface Metric {
  name: string;
  type: 'counter' | 'gauge';
  help: string;
  value: number;
}

/** The simulator's /metrics in the Prometheus text exposition format (version 0.0.4). */
export function renderMetrics(stats: SimStats, cachedBlocks: number): string {
  const metrics: Metric[] = [
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
      value: cachedBlocks,
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
  let text = '';
  for (const m of metrics)
    text += `# HELP ${m.name} ${m.help}\n# TYPE ${m.name} ${m.type}\n${m.name} ${m.value}\n`;
  return text;
}
