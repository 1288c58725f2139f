import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { rendezvousScore } from '../../src/router/policies/rendezvous.js';
import { blockChain, cacheScope, routingText } from '../../src/router/prompt.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { killAll, mapLimit, startServerProcess, waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

const [sqlite, postgres] = storeCases as [(typeof storeCases)[0], (typeof storeCases)[0]];

/** English-like text of about `tokens` tokens (the simulator's tokenizer: about 4 characters a token). */
const words = (seed: string, tokens: number) => {
  const vocabulary = ['kiln', 'glaze', 'clay', 'fire', 'shelf', 'cone', 'ash', 'slip', 'wheel', 'bisque'];
  let text = `${seed}.`;
  for (let i = 0; text.length < tokens * 4; i++) text += ` ${vocabulary[(i * 7 + seed.length) % 10]}`;
  return text;
};

interface Routed {
  status: number;
  route: Record<string, string>;
  cachedReported: number | undefined;
  body: any;
}

/** Sends one sync chat request and answers its route header, parsed, and what the engine reported cached. */
async function chat(url: string, key: string, body: Record<string, unknown>): Promise<Routed> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 2, ...body }),
  });
  const parsed = (await response.json()) as any;
  const route: Record<string, string> = {};
  for (const part of (response.headers.get('x-kiln-route') ?? '').split(';')) {
    const [name, value] = part.trim().split('=');
    if (name && value !== undefined) route[name] = value;
  }
  return {
    status: response.status,
    route,
    cachedReported: parsed?.usage?.prompt_tokens_details?.cached_tokens,
    body: parsed,
  };
}

const inFlightByReplica = (metrics: string, engineName: string): number[] =>
  [
    ...metrics.matchAll(
      new RegExp(`^kiln_replica_in_flight\\{engine="${engineName}",replica="\\d+"\\} (\\d+)$`, 'gm'),
    ),
  ].map((m) => Number(m[1]));

describe('request classes', () => {
  let kiln: TestServer | undefined;
  let sims: LlmSim[] = [];
  afterEach(async () => {
    await kiln?.close();
    await closeAll(sims);
    kiln = undefined;
    sims = [];
  });

  it('the first request with a long persona preamble lands in the shared-prefix pool', async () => {
    const prefix = await simPool(2);
    const unique = await simPool(2);
    sims = [...prefix, ...unique];
    kiln = await startTestServer(sqlite, {
      engines: { 'prefix-pool': engine('shared-prefix', prefix), 'unique-pool': engine('unique', unique) },
      personas: {
        handbook: { model: 'm', system: words('handbook', 900) },
        terse: { model: 'm', system: 'Be brief.' },
      },
    });
    const first = await chat(kiln.url, kiln.adminKey, {
      model: 'handbook',
      messages: [{ role: 'user', content: 'first question ever' }],
    });
    expect(first.status).toBe(200);
    expect(first.route).toMatchObject({ class: 'shared-prefix', engine: 'prefix-pool' });
    const short = await chat(kiln.url, kiln.adminKey, {
      model: 'terse',
      messages: [{ role: 'user', content: 'first question ever' }],
    });
    expect(short.route).toMatchObject({ class: 'unique', engine: 'unique-pool' });
  });

  it('a prompt under the character threshold but over the token threshold goes long-context', async () => {
    const unique = await simPool(1);
    const long = await simPool(1, { contextWindow: 200_000 });
    sims = [...unique, ...long];
    kiln = await startTestServer(sqlite, {
      engines: { 'unique-pool': engine('unique', unique), 'long-pool': engine('long-context', long) },
      'routing.long_context_tokens': 2000,
    });
    // 3,000 digits: 750 tokens at four characters a token, 3,000 in the engine's tokenizer.
    const digits = '3141592653'.repeat(300);
    const dense = await chat(kiln.url, kiln.adminKey, { messages: [{ role: 'user', content: digits }] });
    expect(dense.status).toBe(200);
    expect(dense.body.usage.prompt_tokens).toBeGreaterThan(2000);
    expect(dense.route).toMatchObject({ class: 'long-context', engine: 'long-pool' });
    // The same number of characters of English stays under the threshold.
    const prose = await chat(kiln.url, kiln.adminKey, {
      messages: [{ role: 'user', content: words('prose', 750).slice(0, 3000) }],
    });
    expect(prose.body.usage.prompt_tokens).toBeLessThan(2000);
    expect(prose.route).toMatchObject({ class: 'unique', engine: 'unique-pool' });
  });

  it('an engine’s context-length rejection is retried on the long-context pool and completes', async () => {
    const unique = await simPool(1, { contextWindow: 1000 });
    const long = await simPool(1, { contextWindow: 200_000 });
    sims = [...unique, ...long];
    kiln = await startTestServer(sqlite, {
      // Configured larger than the engine really is, so Kiln sends the prompt and the engine refuses it.
      engines: {
        'unique-pool': engine('unique', unique, { context_tokens: 100_000 }),
        'long-pool': engine('long-context', long),
      },
      'routing.long_context_tokens': 50_000,
    });
    const answer = await chat(kiln.url, kiln.adminKey, {
      messages: [{ role: 'user', content: words('too long for the small engine', 2000) }],
    });
    expect(answer.status).toBe(200);
    expect(answer.body.choices[0].message.content.length).toBeGreaterThan(0);
    expect(answer.route).toMatchObject({ class: 'long-context', engine: 'long-pool' });
    const job = await kiln.call('GET', `/v1/jobs/${answer.body.id}`);
    expect(job.body.status).toBe('completed');
  });

  /** A unique pool of 1,000 tokens, known to Kiln (read from the engine), and a long-context pool. */
  const smallAndLong = async (longContextTokens: number) => {
    const unique = await simPool(1, { contextWindow: 1000 });
    const long = await simPool(1, { contextWindow: 200_000 });
    sims = [...unique, ...long];
    const server = await startTestServer(sqlite, {
      engines: { 'unique-pool': engine('unique', unique), 'long-pool': engine('long-context', long) },
      'routing.long_context_tokens': longContextTokens,
    });
    kiln = server;
    await waitUntil(
      async () =>
        /kiln_replica_context_tokens\{engine="unique-pool",replica="0"\} 1000/.test(
          (await server.call('GET', '/metrics')).body,
        ),
      { timeoutMs: 10_000, describe: () => 'the unique pool’s context size in /metrics' },
    );
    return { unique, long, server };
  };

  it('a context size read from the engine sends a prompt that cannot fit straight to the long-context pool', async () => {
    const { unique, server } = await smallAndLong(50_000);
    const answer = await chat(server.url, server.adminKey, {
      messages: [{ role: 'user', content: words('does not fit', 2000) }],
    });
    expect(answer.status).toBe(200);
    expect(answer.route).toMatchObject({ engine: 'long-pool' });
    expect((unique[0] as LlmSim).stats().requests).toBe(0);
  });

  it('a long-context prompt whose long-context replica failed or is ejected never goes to a replica too small for it', async () => {
    const { unique, long, server } = await smallAndLong(1500);
    // The long-context engine breaks off every answer before its first byte (retryable).
    await (long[0] as LlmSim).setFault({ kind: 'drop-mid-stream', afterChunks: 0 });
    const prompt = { messages: [{ role: 'user', content: words('long prompt', 2000) }] };
    // Three tries: the retry after each, then the ejection after the third failure.
    for (let i = 0; i < 3; i++) {
      const answer = await chat(server.url, server.adminKey, prompt);
      expect(answer.route).toMatchObject({ class: 'long-context', engine: 'long-pool' });
      expect(answer.status).toBe(502);
      expect(answer.body.error.code).toBe('inference-failed');
    }
    // The fault is gone but the replica is ejected: the prompt waits for nothing it cannot fit in.
    await (long[0] as LlmSim).setFault(undefined);
    const ejected = await chat(server.url, server.adminKey, prompt);
    expect(ejected.status).toBe(503);
    expect(ejected.body.error.code).toBe('engine-unavailable');
    expect((unique[0] as LlmSim).stats().requests).toBe(0);
  });
});

describe('cache-aware replica choice', () => {
  let kiln: TestServer | undefined;
  let sims: LlmSim[] = [];
  afterEach(async () => {
    await kiln?.close();
    await closeAll(sims);
    kiln = undefined;
    sims = [];
  });

  it('follows the cache, and after a replica’s cache is emptied stops predicting hits there within 5 requests', async () => {
    sims = await simPool(2);
    kiln = await startTestServer(sqlite, { engines: { pool: engine('shared-prefix', sims) } });
    const manuals = Array.from({ length: 8 }, (_, i) => ({
      role: 'system',
      content: words(`manual ${i}`, 600),
    }));
    const ask = (i: number, question: string) =>
      chat((kiln as TestServer).url, (kiln as TestServer).adminKey, {
        messages: [manuals[i], { role: 'user', content: question }],
      });
    const home: string[] = [];
    for (let i = 0; i < manuals.length; i++) home.push((await ask(i, 'first')).route.replica as string);
    // Every later request of a manual goes where it went first, and the engine confirms the hit.
    for (let i = 0; i < manuals.length; i++) {
      const again = await ask(i, 'second');
      expect(again.route.replica).toBe(home[i]);
      expect(Number(again.route.cached)).toBeGreaterThan(400);
      expect(again.cachedReported).toBeGreaterThanOrEqual(Number(again.route.cached));
    }
    // Replica 0 loses its cache; its manuals are asked again, oldest first (the hardest order).
    // The replica holding more of them (at least 4 of 8) loses its cache.
    const emptied = home.filter((r) => r === '0').length >= 4 ? '0' : '1';
    const onEmptied = manuals.map((_, i) => i).filter((i) => home[i] === emptied);
    expect(onEmptied.length).toBeGreaterThanOrEqual(4);
    const reset = await fetch(`${(sims[Number(emptied)] as LlmSim).url}/reset_prefix_cache`, {
      method: 'POST',
    });
    expect(reset.status).toBe(200);
    const wrong: number[] = [];
    for (const [n, i] of onEmptied.entries()) {
      const after = await ask(i, 'third');
      if (after.route.replica !== emptied) continue;
      if (Number(after.route.cached) > (after.cachedReported ?? 0) + 64) wrong.push(n);
    }
    expect(wrong.length).toBeGreaterThan(0);
    expect(Math.max(...wrong)).toBeLessThan(5);
    // A prediction the engine contradicted is never repeated: the last ones are right.
    expect(wrong).not.toContain(onEmptied.length - 1);
  });

  it('load still wins: with one prefix taking all traffic, in-flight counts stay within the balance threshold', async () => {
    sims = await simPool(4, { decodeMsPerToken: 2 });
    const threshold = 3;
    const spread = async (policy: string) => {
      kiln = await startTestServer(sqlite, {
        engines: {
          pool: engine('shared-prefix', sims, { routing: { policy, balance_abs_threshold: threshold } }),
        },
      });
      const server = kiln;
      const system = { role: 'system', content: words(`hot manual ${policy}`, 600) };
      let widest = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const loads = inFlightByReplica((await server.call('GET', '/metrics')).body, 'pool');
          widest = Math.max(widest, Math.max(...loads) - Math.min(...loads));
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const answers = await mapLimit(
        Array.from({ length: 120 }, (_, i) => i),
        24,
        (i) =>
          chat(server.url, server.adminKey, {
            max_tokens: 60,
            messages: [system, { role: 'user', content: `q${i}` }],
          }),
      );
      sampling = false;
      await sampler;
      await server.close();
      kiln = undefined;
      expect(answers.every((a) => a.status === 200)).toBe(true);
      return { widest, replicas: new Set(answers.map((a) => a.route.replica)).size };
    };
    const kilnPolicy = await spread('cache-aware');
    expect(kilnPolicy.widest).toBeLessThanOrEqual(threshold);
    expect(kilnPolicy.replicas).toBe(4);
    // Without the bound (SGLang's 64 in flight), the hot prefix piles onto one replica.
    const unbounded = await spread('sglang');
    expect(unbounded.widest).toBeGreaterThan(threshold);
  });
});

describe.skipIf(postgres.skip)(`several gateways ${caseTitle(postgres)}`, () => {
  const dirs: string[] = [];
  let sims: LlmSim[] = [];
  afterAll(async () => {
    await killAll();
    await closeAll(sims);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('two gateway processes on PostgreSQL send one prefix to one replica', async () => {
    sims = await simPool(2, { decodeMsPerToken: 5 });
    const urls = sims.map((s) => s.url);
    // Prompts whose rendezvous home is replica 0: a gateway that knew nothing would send them there.
    // The organisation's scope seeds the chain (routing.cache_scope: organisation, the default).
    let scope = '';
    const homeOf = (messages: { role: string; content: string }[]) => {
      const key = blockChain(routingText(messages), 256, scope)[0] as string;
      return rendezvousScore(key, urls[0] as string) > rendezvousScore(key, urls[1] as string) ? 0 : 1;
    };
    const onZero = (prefix: string, count: number) => {
      const found: { role: string; content: string }[] = [];
      for (let i = 0; found.length < count; i++) {
        const system = { role: 'system', content: words(`${prefix} ${i}`, 600) };
        if (homeOf([system, { role: 'user', content: 'x' }]) === 0) found.push(system);
      }
      return found;
    };
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-gateways-'));
    dirs.push(dir);
    const configFile = path.join(dir, 'kiln.yaml');
    writeFileSync(
      configFile,
      stringify({
        engines: { pool: { serves: 'shared-prefix', replicas: urls, models: { m: 'sim-model' } } },
      }),
    );
    const fresh = postgres.fresh();
    const env = {
      KILN_CONFIG: configFile,
      KILN_DATA_DIR: dir,
      KILN_PORT: '0',
      KILN_STORE_URL: fresh.store.url,
      KILN_STORE_SCHEMA: fresh.store.schema,
      KILN_LOG_LEVEL: 'info',
    };
    try {
      const a = await startServerProcess(env);
      const b = await startServerProcess(env);
      const key = readFileSync(path.join(dir, 'admin.key'), 'utf8').trim();
      const orgs = await fetch(`${a.url}/admin/v1/orgs`, { headers: { authorization: `Bearer ${key}` } });
      scope = cacheScope(((await orgs.json()) as { data: { id: string }[] }).data[0]?.id);
      const [busy] = onZero('busy work', 1);
      const manuals = onZero('manual', 4);

      // Gateway A is busy on replica 0 (long streamed answers of another prefix, which follow their
      // cache there), so it places the manuals on replica 1.
      const stream = async (i: number) => {
        const response = await fetch(`${a.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'm',
            stream: true,
            max_tokens: 400,
            messages: [busy, { role: 'user', content: `busy ${i}` }],
          }),
        });
        const replica = /replica=(\d+)/.exec(response.headers.get('x-kiln-route') ?? '')?.[1];
        await response.text();
        return { status: response.status, replica };
      };
      expect(await stream(0)).toEqual({ status: 200, replica: '0' });
      const busyRuns = Array.from({ length: 4 }, (_, i) => stream(i + 1));
      await new Promise((r) => setTimeout(r, 300));
      const placed: string[] = [];
      for (const manual of manuals) {
        const first = await chat(a.url, key, { messages: [manual, { role: 'user', content: 'first' }] });
        placed.push(first.route.replica as string);
      }
      expect(placed.every((replica) => replica === '1')).toBe(true);
      for (const done of await Promise.all(busyRuns)) expect(done).toEqual({ status: 200, replica: '0' });
      // Long enough for B's view of the engines' own load to show them idle again.
      await new Promise((r) => setTimeout(r, 1500));

      // Gateway B, idle, sends each manual where A put it, not to its rendezvous home, expecting the hit.
      for (const [i, manual] of manuals.entries()) {
        const fromB = await chat(b.url, key, { messages: [manual, { role: 'user', content: 'from b' }] });
        expect(fromB.route.replica).toBe(placed[i]);
        expect(Number(fromB.route.cached)).toBeGreaterThan(400);
        expect(fromB.cachedReported).toBeGreaterThan(400);
      }
    } finally {
      await killAll();
      await fresh.cleanup();
    }
  });
});
