import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const MAX_JSON_DEPTH = 128;

import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** `{"a":{"a":…1}}`, `levels` objects deep, as JSON text: deeper than JSON.stringify could write. */
const nested = (levels: number): string => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

/** A JSON object's text with `extra` (JSON text) added under `name`. */
const withField = (body: object, name: string, extra: string) =>
  `${JSON.stringify(body).slice(0, -1)},${JSON.stringify(name)}:${extra}}`;

/**
 * Input built to trip a JavaScript service rather than to be valid: names of Object.prototype's
 * properties, JSON nested thousands deep, bytes that are not UTF-8, numbers past a double. Each is
 * a 4xx with the envelope before any job or row exists, on both stores.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`hostile input: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let sims: LlmSim[] = [];

    beforeAll(async () => {
      sims = await simPool(1);
      kiln = await startTestServer(storeCase, {
        engines: { pool: engine('unique', sims) },
        personas: { helper: { model: 'm' } },
      });
    });
    afterAll(async () => {
      await kiln?.close();
      await closeAll(sims);
    });

    /** A key of an organisation of its own, so that its job list holds only what the test made. */
    const freshKey = (name: string) => kiln.key(`${name}-${Math.random()}`);
    const jobsOf = async (key: string) => (await kiln.call('GET', '/v1/jobs', { key })).body.data;

    it('a model named after an Object.prototype property is 404 model-not-found in every mode; no job exists', async () => {
      const key = await freshKey('proto');
      const messages = [{ role: 'user', content: 'hi' }];
      for (const model of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
        for (const extra of [{}, { stream: true }, { mode: 'async' }]) {
          const answer = await kiln.call('POST', '/v1/chat/completions', {
            key,
            body: { model, messages, ...extra },
          });
          expect(answer.status, `${model} ${JSON.stringify(extra)}`).toBe(404);
          expect(answer.body.error).toMatchObject({ code: 'model-not-found', param: 'model' });
        }
        for (const extra of [{}, { stream: true }, { background: true }]) {
          const answer = await kiln.call('POST', '/v1/responses', {
            key,
            body: { model, input: 'hi', ...extra },
          });
          expect(answer.status, `${model} ${JSON.stringify(extra)}`).toBe(404);
          expect(answer.body.error.code).toBe('model-not-found');
        }
      }
      expect(await jobsOf(key)).toEqual([]);
      // The persona and the served model still answer.
      for (const model of ['helper', 'm']) {
        const answer = await kiln.call('POST', '/v1/chat/completions', { key, body: { model, messages } });
        expect(answer.status).toBe(200);
      }
    });

    it(`JSON nested deeper than ${MAX_JSON_DEPTH} levels is 400 depth, in any mode and with an Idempotency-Key; no job exists`, async () => {
      const key = await freshKey('deep');
      const messages = [{ role: 'user', content: 'hi' }];
      for (const levels of [MAX_JSON_DEPTH + 1, 5000, 20000]) {
        for (const [extra, headers] of [
          [{}, {}],
          [{ stream: true }, {}],
          [{ mode: 'async' }, { 'idempotency-key': `deep-${levels}` }],
        ] as const) {
          const answer = await kiln.call('POST', '/v1/chat/completions', {
            key,
            headers,
            body: withField({ model: 'm', messages, ...extra }, 'extra', nested(levels)),
          });
          expect(answer.status, `${levels} levels, ${JSON.stringify(extra)}`).toBe(400);
          expect(answer.body.error.code).toBe('validation-failed');
          expect(answer.body.error.details[0]).toMatchObject({ rule: 'depth', limit: MAX_JSON_DEPTH });
          expect(answer.body.error.details[0].field).toMatch(/^extra(\.a)+$/);
        }
        const tools = `[{"type":"function","name":"f","parameters":${nested(levels)}}]`;
        const response = await kiln.call('POST', '/v1/responses', {
          key,
          body: withField({ model: 'm', input: 'hi' }, 'tools', tools),
        });
        expect(response.status).toBe(400);
        expect(response.body.error.details[0]).toMatchObject({ rule: 'depth', limit: MAX_JSON_DEPTH });
      }
      expect(await jobsOf(key)).toEqual([]);
      // At the limit, the body is taken, stored and answered.
      const answer = await kiln.call('POST', '/v1/chat/completions', {
        key,
        body: withField({ model: 'm', messages, mode: 'async' }, 'extra', nested(MAX_JSON_DEPTH - 1)),
      });
      expect(answer.status, JSON.stringify(answer.body)).toBe(202);
    });

    it('a body that is not UTF-8 is 400 invalid-json, and nothing is stored', async () => {
      const raw = Buffer.concat([
        Buffer.from('{"name":"bad-utf8","content":"'),
        Buffer.from([0xff, 0xfe, 0xc3]),
        Buffer.from('"}'),
      ]);
      const response = await fetch(`${kiln.url}/api/v1/contexts`, {
        method: 'POST',
        headers: { authorization: `Bearer ${kiln.adminKey}`, 'content-type': 'application/json' },
        body: raw,
      });
      expect(response.status).toBe(400);
      const body = (await response.json()) as any;
      expect(body.error).toMatchObject({ code: 'invalid-json', param: 'body' });
      expect(body.error.details[0]).toMatchObject({ field: 'body', rule: 'json' });
      expect((await kiln.call('GET', '/api/v1/contexts/bad-utf8')).status).toBe(404);
      // Valid UTF-8, multi-byte characters included, is taken as sent.
      const fine = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'good-utf8', content: 'clé 窯 🔥' },
      });
      expect(fine.status).toBe(201);
      expect((await kiln.call('GET', '/api/v1/contexts/good-utf8')).body.content).toBe('clé 窯 🔥');
    });

    it('a number past a double (1e400) is 400 finite, not stored as null', async () => {
      const key = await freshKey('huge');
      const text =
        '{"model":"m","mode":"async","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}';
      const answer = await kiln.call('POST', '/v1/chat/completions', { key, body: text });
      expect(answer.status).toBe(400);
      expect(answer.body.error.details[0]).toMatchObject({ field: 'max_tokens', rule: 'finite' });
      const response = await kiln.call('POST', '/v1/responses', {
        key,
        body: '{"model":"m","input":"hi","background":true,"max_output_tokens":-1e999}',
      });
      expect(response.status).toBe(400);
      expect(response.body.error.details[0]).toMatchObject({ field: 'max_output_tokens', rule: 'finite' });
      expect(await jobsOf(key)).toEqual([]);
    });

    it('a compressed body is 415 unsupported-media-type, not a 400 about its JSON; nothing is stored', async () => {
      const send = (encoding: string, body: Buffer | string) =>
        fetch(`${kiln.url}/api/v1/contexts`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${kiln.adminKey}`,
            'content-type': 'application/json',
            'content-encoding': encoding,
          },
          body,
        });
      const json = JSON.stringify({ name: 'zipped', content: 'hello' });
      const zipped = await send('gzip', gzipSync(json));
      expect(zipped.status).toBe(415);
      expect(((await zipped.json()) as any).error).toMatchObject({
        code: 'unsupported-media-type',
        message: expect.stringContaining('gzip'),
      });
      expect((await kiln.call('GET', '/api/v1/contexts/zipped')).status).toBe(404);
      expect((await send('identity', json)).status).toBe(201);
    });
  });
}
