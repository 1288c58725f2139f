/**
 * Prefix-cache figures: the replicas' own counters scraped from /metrics, and the oracle — one
 * replica big enough to hold everything, computed in process with the simulator's own code.
 */
import { blockHashes, PrefixCache } from '../../src/sim/llm/prefix-cache.js';
import { countTokens, renderChatPrompt } from '../../src/sim/llm/text.js';
import type { Message } from './workloads.js';

/** Sum of every sample of each metric in a Prometheus text body, by metric name. */
export function parseMetrics(text: string): Map<string, number> {
  const sums = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const value = Number(match[3]);
    if (!Number.isFinite(value)) continue;
    const name = match[1] as string;
    sums.set(name, (sums.get(name) ?? 0) + value);
  }
  return sums;
}

/** GET <url>/metrics, parsed; undefined when it does not answer 200. */
export async function scrape(
  url: string,
  headers: Record<string, string> = {},
): Promise<Map<string, number> | undefined> {
  try {
    const response = await fetch(`${url}/metrics`, { headers, signal: AbortSignal.timeout(5000) });
    const text = await response.text();
    return response.status === 200 ? parseMetrics(text) : undefined;
  } catch {
    return undefined;
  }
}

/** Prefix-cache counters summed over replicas, in tokens (vLLM's queries and hits). */
export interface CacheCounters {
  queryTokens: number;
  hitTokens: number;
  /** Which series they came from. */
  source: string;
}

/**
 * The replicas' prefix-cache counters summed: vLLM's `prefix_cache_queries_total` and
 * `prefix_cache_hits_total` (tokens); failing those, the simulator's own block counters converted
 * to tokens (hits + misses blocks as the queries: an approximation that leaves out partial blocks).
 */
export async function cacheCounters(urls: string[], blockTokens: number): Promise<CacheCounters> {
  let queryTokens = 0;
  let hitTokens = 0;
  let source = 'vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total';
  for (const url of urls) {
    const metrics = await scrape(url);
    if (!metrics) throw new Error(`replica ${url} did not answer /metrics`);
    const queries = metrics.get('vllm:prefix_cache_queries_total');
    const hits = metrics.get('vllm:prefix_cache_hits_total');
    if (queries !== undefined && hits !== undefined) {
      queryTokens += queries;
      hitTokens += hits;
      continue;
    }
    source = 'kiln_sim_prefix_cache_hits_total / (hits + misses), blocks';
    const blockHits = metrics.get('kiln_sim_prefix_cache_hits_total') ?? 0;
    const blockMisses = metrics.get('kiln_sim_prefix_cache_misses_total') ?? 0;
    queryTokens += (blockHits + blockMisses) * blockTokens;
    hitTokens += blockHits * blockTokens;
  }
  return { queryTokens, hitTokens, source };
}

export const hitRate = (before: CacheCounters, after: CacheCounters) => {
  const queries = after.queryTokens - before.queryTokens;
  return queries > 0 ? (after.hitTokens - before.hitTokens) / queries : Number.NaN;
};

/**
 * The hit rate, in tokens, of one replica whose cache never evicts, given the prompts in the order
 * they were submitted — the simulator's rules: the rendered chat prompt cut into blocks of
 * `blockTokens`, the leading blocks found in the cache reused, the last prompt token always computed.
 */
export function oracleHitRate(prompts: readonly (readonly Message[])[], blockTokens: number): number {
  const cache = new PrefixCache(Number.MAX_SAFE_INTEGER);
  let queried = 0;
  let hits = 0;
  for (const messages of prompts) {
    const prompt = renderChatPrompt(messages);
    const promptTokens = countTokens(prompt);
    const blocks = blockHashes(prompt, blockTokens);
    const matchable = Math.floor((promptTokens - 1) / blockTokens);
    hits += cache.match(blocks.slice(0, matchable)) * blockTokens;
    queried += promptTokens;
    cache.insert(blocks);
  }
  return queried > 0 ? hits / queried : Number.NaN;
}
