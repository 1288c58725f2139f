import { describe, expect, it } from 'vitest';
import { ApproximateRadixTree } from '../../src/router/policies/radix-tree.js';
import { SglangCacheAware } from '../../src/router/policies/sglang.js';
import type { ReplicaView, RoutingRequest } from '../../src/router/policy.js';

const replica = (index: number, inFlight = 0): ReplicaView => ({
  url: `http://replica-${index}:30000`,
  engine: 'sglang',
  index,
  inFlight,
  engineLoad: undefined,
  pendingPrefillTokens: 0,
  kvCapacityTokens: 100_000,
});

const request = (text: string, charsPerToken = 4): RoutingRequest => ({
  text,
  scope: '',
  blocks: [],
  blockChars: 256,
  promptTokens: Math.ceil(text.length / charsPerToken),
  charsPerToken,
});

/** `length` characters that share no prefix with another seed's. */
const unique = (seed: string, length: number) => `${seed}:`.padEnd(length, seed.at(-1));

const system = unique('You are a careful assistant', 400);

describe('SGLang cache-aware routing', () => {
  it('sends a prompt that shares a long prefix to the worker holding it, even when it is busier', () => {
    const policy = new SglangCacheAware();
    const first = policy.choose([replica(0, 3), replica(1, 0), replica(2, 3)], request(`${system} first`));
    expect(first.replica.index).toBe(1);
    expect(first.predictedCachedTokens).toBe(0);

    const second = policy.choose(
      [replica(0, 0), replica(1, 5), replica(2, 0)],
      request(`${system} second question`),
    );
    expect(second.replica.index).toBe(1);
    // `${system} ` is cached: 401 characters at 4 a token.
    expect(second.predictedCachedTokens).toBe(100);
  });

  it('sends a prompt with no match to the least-loaded worker, as SGLang does today', () => {
    const policy = new SglangCacheAware();
    policy.choose([replica(0)], request(unique('a', 3000)));
    const choice = policy.choose([replica(0, 0), replica(1, 2)], request(unique('b', 100)));
    expect(choice.replica.index).toBe(0);
    const busy = policy.choose([replica(0, 3), replica(1, 2)], request(unique('c', 100)));
    expect(busy.replica.index).toBe(1);
  });

  it('with onCacheMiss smallestTree, sends a new prefix to the worker with the smallest tree', () => {
    const policy = new SglangCacheAware({ onCacheMiss: 'smallestTree' });
    policy.choose([replica(0)], request(unique('a', 3000)));
    policy.choose([replica(1)], request(unique('b', 1000)));
    const fresh = policy.choose([replica(0), replica(1), replica(2, 9)], request(unique('c', 500)));
    expect(fresh.replica.index).toBe(2);
    expect(fresh.predictedCachedTokens).toBe(0);
    expect(policy.treeChars(replica(2))).toBe(500);

    // Now replica 2 holds 500 characters and replica 1 1000: the next new prefix goes to replica 2 again.
    const next = policy.choose([replica(0), replica(1), replica(2)], request(unique('d', 300)));
    expect(next.replica.index).toBe(2);
  });

  describe('the match threshold', () => {
    const held = unique('h', 100);
    const probe = (sharedChars: number) =>
      request(held.slice(0, sharedChars) + unique('z', 100 - sharedChars));
    const seeded = () => {
      const policy = new SglangCacheAware({ onCacheMiss: 'smallestTree' });
      policy.choose([replica(0)], request(held));
      return policy;
    };

    it('at a match rate of 0.3 or below, goes to the smallest tree', () => {
      const choice = seeded().choose([replica(0), replica(1)], probe(30));
      expect(choice.replica.index).toBe(1);
      expect(choice.predictedCachedTokens).toBe(0);
    });

    it('above 0.3, goes to the worker with the match', () => {
      const choice = seeded().choose([replica(0), replica(1)], probe(32));
      expect(choice.replica.index).toBe(0);
      expect(choice.predictedCachedTokens).toBe(8);
    });
  });

  describe('load imbalance', () => {
    const seeded = () => {
      const policy = new SglangCacheAware();
      policy.choose([replica(0)], request(`${system} seed`));
      return policy;
    };
    const route = (policy: SglangCacheAware, loads: [number, number]) =>
      policy.choose([replica(0, loads[0]), replica(1, loads[1])], request(`${system} next`));

    it('sends to the least-loaded worker when both thresholds are exceeded, ignoring the cache', () => {
      const choice = route(seeded(), [70, 5]);
      expect(choice.replica.index).toBe(1);
      expect(choice.predictedCachedTokens).toBe(0);
    });

    it('keeps cache affinity when the spread is within the absolute threshold', () => {
      expect(route(seeded(), [70, 60]).replica.index).toBe(0);
      expect(route(seeded(), [64, 0]).replica.index).toBe(0);
      expect(route(seeded(), [69, 5]).replica.index).toBe(0);
    });

    it('keeps cache affinity when the ratio is within the relative threshold', () => {
      // A spread of 65 exceeds 64, but 200 is not more than 1.5 × 135.
      expect(route(seeded(), [200, 135]).replica.index).toBe(0);
      expect(route(seeded(), [200, 133]).replica.index).toBe(1);
    });

    it('still records the prompt on the worker it sent it to', () => {
      const policy = seeded();
      route(policy, [70, 5]);
      policy.forget(replica(0));
      const after = policy.choose([replica(0), replica(1)], request(`${system} next turn`));
      expect(after.replica.index).toBe(1);
      expect(after.predictedCachedTokens).toBeGreaterThan(100);
    });
  });

  it('only considers the candidates it is given', () => {
    const policy = new SglangCacheAware();
    policy.choose([replica(0)], request(`${system} long conversation that replica 0 holds`));
    policy.choose([replica(1)], request(`${system} other`));
    const choice = policy.choose(
      [replica(1, 1), replica(2)],
      request(`${system} long conversation that replica 0 holds, and more`),
    );
    expect(choice.replica.index).toBe(1);
    expect(choice.predictedCachedTokens).toBe(100);
  });

  it('forget drops the worker from the tree', () => {
    const policy = new SglangCacheAware();
    policy.choose([replica(0)], request(`${system} a`));
    expect(policy.treeChars(replica(0))).toBe(system.length + 2);
    policy.forget(replica(0));
    expect(policy.treeChars(replica(0))).toBe(0);
    const choice = policy.choose([replica(0, 1), replica(1)], request(`${system} b`));
    expect(choice.replica.index).toBe(1);
    expect(choice.predictedCachedTokens).toBe(0);
  });

  describe('eviction', () => {
    const setup = () => {
      let now = 0;
      const policy = new SglangCacheAware({ maxTreeSize: 100, evictionIntervalMs: 1000, now: () => now });
      for (const seed of ['a', 'b', 'c']) policy.choose([replica(0)], request(unique(seed, 60)));
      return { policy, advance: (ms: number) => (now += ms) };
    };

    it('waits for the interval', () => {
      const { policy, advance } = setup();
      advance(999);
      policy.choose([replica(1)], request(unique('x', 10)));
      expect(policy.treeChars(replica(0))).toBe(180);
    });

    it('trims each worker to max_tree_size, least recently used first', () => {
      const { policy, advance } = setup();
      advance(1000);
      policy.choose([replica(1)], request(unique('x', 10)));
      expect(policy.treeChars(replica(0))).toBe(60);
      expect(policy.treeChars(replica(1))).toBe(10);
      expect(policy.choose([replica(0)], request(unique('a', 60))).predictedCachedTokens).toBe(0);
      expect(policy.choose([replica(0)], request(unique('c', 60))).predictedCachedTokens).toBe(15);
    });
  });
});

describe('the approximate radix tree', () => {
  it('splits edges and counts each tenant once per character it holds', () => {
    const tree = new ApproximateRadixTree();
    tree.insert('hello world', 'a');
    tree.insert('hello there', 'a');
    tree.insert('hello', 'b');
    expect(tree.tenantChars('a')).toBe('hello world'.length + 'there'.length);
    expect(tree.tenantChars('b')).toBe(5);
    expect(tree.prefixMatch('hello there, friend')).toMatchObject({ matchedChars: 11, tenant: 'a' });
    expect(tree.prefixMatch('hello world', new Set(['b']))).toMatchObject({ matchedChars: 5, tenant: 'b' });
    expect(tree.prefixMatch('goodbye')).toMatchObject({ matchedChars: 0 });
  });

  it('answers a shared node with the tenant that created it', () => {
    const tree = new ApproximateRadixTree();
    tree.insert('shared prefix', 'b');
    tree.insert('shared prefix', 'a');
    expect(tree.prefixMatch('shared prefix and more').tenant).toBe('b');
    tree.removeTenant('b');
    expect(tree.prefixMatch('shared prefix and more').tenant).toBe('a');
  });

  it('evicting one tenant leaves the nodes another holds', () => {
    const tree = new ApproximateRadixTree();
    tree.insert(unique('p', 50), 'a');
    tree.insert(unique('q', 50), 'a');
    tree.insert(unique('p', 50), 'b');
    tree.evictToSize(60);
    expect(tree.tenantChars('a')).toBe(50);
    expect(tree.tenantChars('b')).toBe(50);
    expect(tree.prefixMatch(unique('p', 50), new Set(['a'])).matchedChars).toBe(0);
    expect(tree.prefixMatch(unique('q', 50), new Set(['a'])).matchedChars).toBe(50);
    expect(tree.prefixMatch(unique('p', 50), new Set(['b'])).matchedChars).toBe(50);
  });
});
