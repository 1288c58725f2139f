import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../src/router/policies/cache-aware.js';
import type { ReplicaView, RoutingRequest } from '../../src/router/policy.js';
import { PrefixIndex } from '../../src/router/prefix-index.js';
import { blockChain } from '../../src/router/prompt.js';

const replica = (index: number, inFlight = 0): ReplicaView => ({
  url: `http://127.0.0.1:${9000 + index}`,
  engine: 'pool',
  index,
  inFlight,
  engineLoad: undefined,
  pendingPrefillTokens: 0,
  kvCapacityTokens: 4096,
});

/** A prompt of `blocks` whole blocks of 100 characters, at 4 characters a token. */
const request = (name: string, blocks = 10): RoutingRequest => {
  const text = `${name}:`.padEnd(blocks * 100, '.');
  return {
    text,
    blocks: blockChain(text, 100),
    blockChars: 100,
    scope: '',
    promptTokens: text.length / 4,
    charsPerToken: 4,
  };
};

describe('the prefix index and the cache-aware policy', () => {
  it('evicts least recently used blocks past the replica’s capacity, as the engine does', () => {
    const index = new PrefixIndex();
    // 4096 tokens × 4 characters / 100 = 163 blocks: room for 16 prompts of 10 blocks.
    const policy = new CacheAwarePolicy(index, { balanceAbsThreshold: 8 });
    const only = [replica(0)];
    for (let i = 0; i < 17; i++) policy.choose(only, request(`p${i}`));
    expect(policy.choose(only, request('p16')).predictedCachedTokens).toBe(249); // all but the last token
    // The oldest went first, tail first: 170 blocks for 163, so p0 keeps only its first 3.
    expect(policy.choose(only, request('p0')).predictedCachedTokens).toBe(75);
  });

  it('sends a prefix where it is cached, and a new one to its rendezvous home', () => {
    const policy = new CacheAwarePolicy(new PrefixIndex(), { balanceAbsThreshold: 8 });
    const replicas = [replica(0), replica(1), replica(2)];
    const first = policy.choose(replicas, request('manual'));
    expect(first.predictedCachedTokens).toBe(0);
    const again = policy.choose(replicas, request('manual'));
    expect(again.replica).toBe(first.replica);
    // Another process with an empty index picks the same home.
    const elsewhere = new CacheAwarePolicy(new PrefixIndex(), { balanceAbsThreshold: 8 });
    expect(elsewhere.choose(replicas, request('manual')).replica).toBe(first.replica);
  });

  it('a replica loaded past the bound takes no new request, whatever it caches', () => {
    const policy = new CacheAwarePolicy(new PrefixIndex(), { balanceAbsThreshold: 3 });
    const cold = replica(1, 0);
    const hot = { ...replica(0), inFlight: 0 };
    const home = policy.choose([hot, cold], request('hot')).replica;
    const other = home === hot ? cold : hot;
    // Two more in flight than the other: the cache still wins.
    expect(policy.choose([{ ...home, inFlight: 2 }, other], request('hot')).replica.url).toBe(home.url);
    // Three more: past the bound, the other replica takes it (and caches the prefix from then on).
    expect(policy.choose([{ ...home, inFlight: 3 }, other], request('hot')).replica).toBe(other);
  });

  it('a reported miss forgets the evicted prefix and everything older; two full misses forget the replica', () => {
    const index = new PrefixIndex();
    const policy = new CacheAwarePolicy(index, { balanceAbsThreshold: 8 });
    const only = [replica(0)];
    for (const name of ['a', 'b', 'c', 'd']) policy.choose(only, request(name));
    // 'b' comes back with nothing cached: 'a' and 'b' are gone, 'c' and 'd' stay.
    const b = request('b');
    const choice = policy.choose(only, b);
    expect(choice.predictedCachedTokens).toBeGreaterThan(0);
    policy.observe(only[0] as ReplicaView, b, choice, { ok: true, promptTokens: 250, cachedTokens: 0 });
    expect(policy.choose(only, request('a')).predictedCachedTokens).toBe(0);
    const c = request('c');
    const cChoice = policy.choose(only, c);
    expect(cChoice.predictedCachedTokens).toBeGreaterThan(0);
    // 'c' missing entirely too: the second full miss in a row means the cache was emptied.
    policy.observe(only[0] as ReplicaView, c, cChoice, { ok: true, promptTokens: 250, cachedTokens: 0 });
    expect(policy.choose(only, request('d')).predictedCachedTokens).toBe(0);
    expect(policy.choose(only, request('c')).predictedCachedTokens).toBeGreaterThan(0);
  });

  it('a prompt the replica refused before answering is not predicted cached there; what it had stays', () => {
    const policy = new CacheAwarePolicy(new PrefixIndex(), { balanceAbsThreshold: 8 });
    const only = [replica(0)];
    // The replica holds a shared head of 5 blocks from an earlier prompt.
    const head = 'shared:'.padEnd(500, '.');
    const earlier = request('x');
    const withHead = (tail: string): RoutingRequest => {
      const text = `${head}${tail}`.padEnd(1000, '!');
      return { ...earlier, text, blocks: blockChain(text, 100), promptTokens: 250 };
    };
    const first = withHead('one');
    policy.observe(only[0] as ReplicaView, first, policy.choose(only, first), {
      ok: true,
      prefilled: true,
    });
    // A second prompt on that head is refused (too long, the replica down) before any answer.
    const refused = withHead('two');
    const choice = policy.choose(only, refused);
    expect(choice.predictedCachedTokens).toBe(125);
    policy.observe(only[0] as ReplicaView, refused, choice, { ok: false, prefilled: false });
    // Only the head it held before is predicted, not the refused prompt's own blocks.
    expect(policy.choose(only, withHead('two')).predictedCachedTokens).toBe(125);
    // A failure after the answer began leaves the prompt cached: the engine had computed it.
    const broken = withHead('three');
    policy.observe(only[0] as ReplicaView, broken, policy.choose(only, broken), {
      ok: false,
      prefilled: true,
    });
    expect(policy.choose(only, withHead('three')).predictedCachedTokens).toBe(249);
  });
});
