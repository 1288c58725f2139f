import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';
import { closeAll, engine, simPool } from './fleet.js';

describe.each(storeCases)('GET /v1/models, a persona that names contexts, on $name', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1);
    kiln = await startTestServer(storeCase, {
      engines: {
        pool: engine('unique', sims, { models: { m: 'sim-model', 'meta-llama/Llama-3.1-8B': 'sim-model' } }),
      },
      personas: {
        oncall: { model: 'm', contexts: ['runbook'] },
        plain: { model: 'm' },
      },
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  it.skipIf(storeCase.skip)(caseTitle(storeCase), async () => {
    const ready = async (key: string) => {
      const { body } = await kiln.call('GET', '/v1/models', { key });
      return Object.fromEntries(body.data.map((m: { id: string; ready: boolean }) => [m.id, m.ready]));
    };
    const ask = (key: string) =>
      kiln.call('POST', '/v1/chat/completions', {
        key,
        body: { model: 'oncall', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] },
      });
    const other = await kiln.key('elsewhere');

    // The admin's organisation saves the runbook; the other one has none.
    const saved = await kiln.call('POST', '/api/v1/contexts', {
      body: { name: 'runbook', content: 'Page the SRE.' },
    });
    expect(saved.status).toBe(201);

    expect(await ready(kiln.adminKey)).toMatchObject({ oncall: true, plain: true, m: true });
    expect((await ask(kiln.adminKey)).status).toBe(200);

    // What the list says is what a request finds: not ready, and refused, for the other organisation.
    expect(await ready(other)).toMatchObject({ oncall: false, plain: true, m: true });
    const refused = await ask(other);
    expect(refused.status).toBe(400);
    expect(refused.body.error.details[0]).toMatchObject({ field: 'model', rule: 'exists' });
    const one = await kiln.call('GET', '/v1/models/oncall', { key: other });
    expect(one.body).toMatchObject({ id: 'oncall', kind: 'persona', ready: false });

    // Once that organisation saves its own, the persona is ready for it too.
    await kiln.call('POST', '/api/v1/contexts', {
      key: other,
      body: { name: 'runbook', content: 'Call Ana.' },
    });
    expect(await ready(other)).toMatchObject({ oncall: true });
  });

  it.skipIf(storeCase.skip)(
    'one model, named with slashes as on Hugging Face, as it is or with %2F',
    async () => {
      for (const path of ['/v1/models/meta-llama/Llama-3.1-8B', '/v1/models/meta-llama%2FLlama-3.1-8B']) {
        const one = await kiln.call('GET', path);
        expect(one.status, path).toBe(200);
        expect(one.body).toMatchObject({ id: 'meta-llama/Llama-3.1-8B', object: 'model', ready: true });
      }
      // A NUL no store could hold is the id's 400, by its name.
      const nul = await kiln.call('GET', '/v1/models/meta-llama%00x');
      expect(nul.status).toBe(400);
      expect(nul.body.error.param).toBe('id');
      const none = await kiln.call('GET', '/v1/models/meta-llama/Llama-9');
      expect(none.status).toBe(404);
      expect(none.body.error).toMatchObject({
        code: 'model-not-found',
        message: expect.stringContaining('meta-llama/Llama-9'),
      });
    },
  );
});
