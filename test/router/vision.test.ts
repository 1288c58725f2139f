import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

const [sqlite] = storeCases as [(typeof storeCases)[0]];

/** A 1×1 PNG, inline, so Kiln fetches nothing. */
const PIXEL =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

const withImage = {
  model: 'm',
  max_tokens: 3,
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in this picture?' },
        { type: 'image_url', image_url: { url: PIXEL } },
      ],
    },
  ],
};
const textOnly = { model: 'm', max_tokens: 3, messages: [{ role: 'user', content: 'Hello there' }] };

/** The replicas of a pool as /admin/v1/fleet shows them. */
async function replicasOf(kiln: TestServer, pool: string): Promise<any[]> {
  const fleet = await kiln.call('GET', '/admin/v1/fleet');
  return fleet.body.pools.find((p: { name: string }) => p.name === pool)?.replicas ?? [];
}

/** Waits until the pool's replicas, as /admin/v1/fleet shows them, all meet `check`. */
function untilReplicas(kiln: TestServer, pool: string, check: (replica: any) => boolean, what: string) {
  return waitUntil(
    async () => {
      const replicas = await replicasOf(kiln, pool);
      return replicas.length > 0 && replicas.every(check);
    },
    { timeoutMs: 15_000, describe: () => what },
  );
}

async function chat(kiln: TestServer, body: unknown) {
  const answer = await kiln.call('POST', '/v1/chat/completions', { body });
  return { ...answer, engine: /engine=([^;]+)/.exec(answer.headers.get('x-kiln-route') ?? '')?.[1] };
}

describe('images go to replicas whose model reads them', () => {
  let kiln: TestServer | undefined;
  let sims: LlmSim[] = [];
  afterEach(async () => {
    await kiln?.close();
    await closeAll(sims);
    kiln = undefined;
    sims = [];
  });

  it('the simulator with a projector says so in /props and answers a picture; without, refuses it', async () => {
    sims = [
      ...(await simPool(1, { flavor: 'llama.cpp', vision: true })),
      ...(await simPool(1, { flavor: 'llama.cpp' })),
      ...(await simPool(1, { flavor: 'vllm' })),
    ];
    const [seeing, blind, text] = sims as [LlmSim, LlmSim, LlmSim];
    const props = async (sim: LlmSim) => ((await (await fetch(`${sim.url}/props`)).json()) as any).modalities;
    expect(await props(seeing)).toEqual({ vision: true, video: false, audio: false });
    expect(await props(blind)).toEqual({ vision: false, video: false, audio: false });
    const ask = (sim: LlmSim) =>
      fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...withImage, model: 'sim-model' }),
      });
    const answered = await ask(seeing);
    expect(answered.status).toBe(200);
    expect(((await answered.json()) as any).choices[0].message.content.length).toBeGreaterThan(0);
    expect((await ask(blind)).status).toBe(500);
    expect((await ask(text)).status).toBe(400);
  });

  it('reads llama.cpp’s /props: a picture goes to the replica with a projector, never to one without', async () => {
    // Two llama.cpp pools of the same model and class: one started without its projector.
    const blind = await simPool(1, { flavor: 'llama.cpp' });
    const seeing = await simPool(1, { flavor: 'llama.cpp', vision: true });
    sims = [...blind, ...seeing];
    kiln = await startTestServer(sqlite, {
      engines: {
        'blind-pool': engine('unique', blind, { routing: { policy: 'round-robin' } }),
        'seeing-pool': engine('unique', seeing, { routing: { policy: 'round-robin' } }),
      },
    });
    const server = kiln;
    await untilReplicas(server, 'blind-pool', (r) => r.vision === false, 'the blind pool’s /props read');
    expect((await replicasOf(server, 'seeing-pool'))[0]?.vision).toBe(true);

    for (let i = 0; i < 4; i++) {
      const answer = await chat(server, withImage);
      expect(answer.status).toBe(200);
      expect(answer.engine).toBe('seeing-pool');
    }
    expect((blind[0] as LlmSim).stats().requests).toBe(0);
    // Text still goes to either.
    const engines = new Set<string | undefined>();
    for (let i = 0; i < 6; i++) engines.add((await chat(server, textOnly)).engine);
    expect([...engines].sort()).toEqual(['blind-pool', 'seeing-pool']);
  });

  it('waits for a reading replica that is down rather than send the picture to one that cannot read it', async () => {
    const blind = await simPool(1, { flavor: 'llama.cpp' });
    const seeing = await simPool(1, { flavor: 'llama.cpp', vision: true });
    sims = [...blind, ...seeing];
    kiln = await startTestServer(sqlite, {
      engines: {
        'blind-pool': engine('unique', blind),
        'seeing-pool': engine('unique', seeing),
      },
      'routing.queue_timeout': '1s',
    });
    const server = kiln;
    await untilReplicas(server, 'blind-pool', (r) => r.vision === false, 'the blind pool’s /props read');
    await (seeing[0] as LlmSim).setFault({ kind: 'refuse' });
    await untilReplicas(server, 'seeing-pool', (r) => r.healthy === false, 'the seeing replica marked down');
    const answer = await chat(server, withImage);
    expect(answer.status).toBe(503);
    expect(answer.body.error.code).toBe('engine-unavailable');
    expect((blind[0] as LlmSim).stats().requests).toBe(0);
  });

  it('right after a reload, a picture still goes only where it can be read', async () => {
    const blind = await simPool(1, { flavor: 'llama.cpp' });
    const seeing = await simPool(1, { flavor: 'llama.cpp', vision: true });
    sims = [...blind, ...seeing];
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-vision-'));
    const configFile = path.join(dir, 'kiln.yaml');
    try {
      writeFileSync(
        configFile,
        stringify({
          engines: {
            'blind-pool': engine('unique', blind, { routing: { policy: 'round-robin' } }),
            'seeing-pool': engine('unique', seeing, { routing: { policy: 'round-robin' } }),
          },
        }),
      );
      kiln = await startTestServer(sqlite, {}, { configFile });
      const server = kiln;
      await untilReplicas(server, 'blind-pool', (r) => r.vision === false, 'the blind pool’s /props read');
      // A reload builds a new fleet: what the engines said stays known, without asking them again.
      expect((await server.call('POST', '/admin/reload')).status).toBe(200);
      expect((await replicasOf(server, 'blind-pool'))[0]?.vision).toBe(false);
      const answers = await Promise.all(Array.from({ length: 4 }, () => chat(server, withImage)));
      expect(answers.map((a) => [a.status, a.engine])).toEqual(Array(4).fill([200, 'seeing-pool']));
      expect((blind[0] as LlmSim).stats().requests).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an overflow engine configured `vision: false` takes no picture: 503 while the reader is down', async () => {
    const seeing = await simPool(1, { flavor: 'llama.cpp', vision: true });
    const cloud = await simPool(1, { flavor: 'vllm' });
    sims = [...seeing, ...cloud];
    kiln = await startTestServer(sqlite, {
      engines: {
        'seeing-pool': engine('unique', seeing),
        cloud: engine('unique', cloud, { overflow: true, vision: false }),
      },
      'routing.queue_timeout': '1s',
    });
    const server = kiln;
    await (seeing[0] as LlmSim).setFault({ kind: 'refuse' });
    await untilReplicas(server, 'seeing-pool', (r) => r.healthy === false, 'the seeing replica marked down');
    const answer = await chat(server, withImage);
    expect(answer.status).toBe(503);
    expect(answer.body.error.code).toBe('engine-unavailable');
    expect((cloud[0] as LlmSim).stats().requests).toBe(0);
    // Text still overflows there.
    const text = await chat(server, textOnly);
    expect([text.status, text.engine]).toEqual([200, 'cloud']);
  });

  it('a configured `vision: false` keeps pictures off a pool whose engine does not say (vLLM)', async () => {
    const text = await simPool(1, { flavor: 'vllm' });
    const multimodal = await simPool(1, { flavor: 'vllm', vision: true });
    sims = [...text, ...multimodal];
    kiln = await startTestServer(sqlite, {
      engines: {
        'text-pool': engine('unique', text, { vision: false, routing: { policy: 'round-robin' } }),
        'multimodal-pool': engine('unique', multimodal, { routing: { policy: 'round-robin' } }),
      },
    });
    for (let i = 0; i < 4; i++) {
      const answer = await chat(kiln, withImage);
      expect(answer.status).toBe(200);
      expect(answer.engine).toBe('multimodal-pool');
    }
    expect((text[0] as LlmSim).stats().requests).toBe(0);
    expect((await replicasOf(kiln, 'text-pool'))[0]?.vision).toBe(false);
    expect((await replicasOf(kiln, 'multimodal-pool'))[0]?.vision).toBeNull();
  });

  it('when no replica of the model reads images, the engine’s refusal is a clear 400', async () => {
    const blind = await simPool(2, { flavor: 'llama.cpp' });
    sims = blind;
    kiln = await startTestServer(sqlite, { engines: { pool: engine('unique', blind) } });
    const server = kiln;
    await untilReplicas(server, 'pool', (r) => r.vision === false, 'both replicas’ /props read');
    const answer = await chat(server, withImage);
    expect(answer.status).toBe(400);
    expect(answer.body.error.code).toBe('engine-rejected');
    expect(answer.body.error.message).toMatch(/image input is not supported/);
  });
});
