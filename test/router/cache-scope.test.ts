import { afterEach, describe, expect, it } from 'vitest';
import { cacheSalt, cacheScope } from '../../src/router/prompt.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * One organisation must not learn what another sends. A prompt cached for organisation B, found in
 * the cache by organisation A, would tell A that B sent it: through the route's predicted `cached`,
 * the engine's `cached_tokens`, the replica chosen and the time to the first token. With
 * `routing.cache_scope: organisation` (the default) each organisation's prompts are routed and,
 * on an engine that takes `cache_salt`, cached apart.
 */

/** A system prompt of about 1,500 tokens: shared-prefix, and many blocks of the engines' caches. */
const SECRET = Array.from({ length: 300 }, (_, i) => `clause ${i} of the merger terms`).join('; ');

const ask = (question: string, extra: Record<string, unknown> = {}) => ({
  model: 'm',
  max_tokens: 2,
  messages: [
    { role: 'system', content: SECRET },
    { role: 'user', content: question },
  ],
  ...extra,
});

async function chat(kiln: TestServer, key: string, body: unknown) {
  const answer = await kiln.call('POST', '/v1/chat/completions', { key, body });
  expect(answer.status).toBe(200);
  return {
    predicted: Number(/cached=(\d+)/.exec(answer.headers.get('x-kiln-route') ?? '')?.[1]),
    reported: answer.body.usage.prompt_tokens_details?.cached_tokens as number,
  };
}

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(
    `prompt caches, organisation by organisation: ${caseTitle(storeCase)}`,
    () => {
      let kiln: TestServer | undefined;
      let sims: LlmSim[] = [];
      afterEach(async () => {
        await kiln?.close();
        await closeAll(sims);
        kiln = undefined;
        sims = [];
      });

      const start = async (overrides: Record<string, unknown> = {}, salt = true) => {
        // One replica: whatever the router predicts, every prompt meets the same engine cache.
        sims = await simPool(1, { flavor: 'vllm' });
        kiln = await startTestServer(storeCase, {
          engines: { pool: engine('shared-prefix', sims, { cache_salt: salt }) },
          ...overrides,
        });
        return { kiln, a: await kiln.key('org-a'), b: await kiln.key('org-b') };
      };

      it('another organisation’s prompt is neither predicted nor found cached; its own is', async () => {
        const { kiln, a, b } = await start();
        await chat(kiln, b, ask('What is clause 7?'));
        const again = await chat(kiln, b, ask('And clause 9?'));
        // B's own cache works: predicted by the router, found by the engine.
        expect(again.predicted).toBeGreaterThan(1000);
        expect(again.reported).toBeGreaterThan(1000);

        expect(await chat(kiln, a, ask('What is clause 7?'))).toEqual({ predicted: 0, reported: 0 });
        // Naming B's salt itself changes nothing: Kiln sets the salt, over the caller's.
        const orgB = (await kiln.server.store.orgs.byName('org-b'))?.id;
        const c = await kiln.key('org-c');
        const forged = await chat(kiln, c, ask('Or clause 8?', { cache_salt: cacheSalt(cacheScope(orgB)) }));
        expect(forged).toEqual({ predicted: 0, reported: 0 });
        // A's second request finds A's first.
        expect((await chat(kiln, a, ask('Then clause 11?'))).reported).toBeGreaterThan(1000);
      });

      it('routing.cache_scope: shared lets every organisation find every other’s prompts', async () => {
        const { kiln, a, b } = await start({ 'routing.cache_scope': 'shared' });
        await chat(kiln, b, ask('What is clause 7?'));
        const probe = await chat(kiln, a, ask('What is clause 7?'));
        expect(probe.predicted).toBeGreaterThan(1000);
        expect(probe.reported).toBeGreaterThan(1000);
      });

      it('without cache_salt on the engine the router still predicts nothing from another organisation', async () => {
        const { kiln, a, b } = await start({}, false);
        await chat(kiln, b, ask('What is clause 7?'));
        expect((await chat(kiln, a, ask('What is clause 7?'))).predicted).toBe(0);
      });
    },
  );
}

describe('the vLLM simulator’s cache_salt', () => {
  it('is refused empty or not a string, in vLLM’s words, and keeps salted prompts apart', async () => {
    const [sim] = (await simPool(1, { flavor: 'vllm' })) as [LlmSim];
    try {
      const send = (extra: Record<string, unknown>) =>
        fetch(`${sim.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ ...ask('What is clause 7?', extra), model: 'sim-model' }),
        });
      for (const salt of ['', 5]) {
        const refused = await send({ cache_salt: salt });
        expect(refused.status).toBe(400);
        expect(((await refused.json()) as any).error.message).toContain(
          "Parameter 'cache_salt' must be a non-empty string if provided.",
        );
      }
      const cached = async (extra: Record<string, unknown>) =>
        ((await (await send(extra)).json()) as any).usage.prompt_tokens_details.cached_tokens as number;
      expect(await cached({ cache_salt: 'one' })).toBe(0);
      expect(await cached({ cache_salt: 'two' })).toBe(0);
      expect(await cached({})).toBe(0);
      expect(await cached({ cache_salt: 'one' })).toBeGreaterThan(1000);
      expect(await cached({ cache_salt: null })).toBeGreaterThan(1000);
    } finally {
      await sim.close();
    }
  });
});
