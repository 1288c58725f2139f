import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * A token budget reserves what the engine will be sent, not only the caller's own messages: a
 * persona's preamble, the contexts a request names and the conversation a response continues are
 * prompt tokens too. Counting only the messages let a few parallel requests with a large context
 * spend many times a day's budget before any of them settled.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(
    `a budget counts the preamble and contexts: ${caseTitle(storeCase)}`,
    () => {
      let kiln: TestServer;
      let sims: LlmSim[];

      beforeAll(async () => {
        sims = await simPool(1);
        kiln = await startTestServer(storeCase, {
          engines: { quick: engine('unique', sims) },
          personas: {
            manual: { model: 'm', system: `Follow the manual. ${'Rule. '.repeat(1300)}` },
            terse: { model: 'm', defaults: { max_tokens: 16 } },
            verbose: { model: 'm', defaults: { max_completion_tokens: 3000 } },
          },
          'jobs.poll_interval_ms': 100,
        });
      });
      afterAll(async () => {
        await kiln?.close();
        await closeAll(sims ?? []);
      });

      async function limited(tokensPerDay: number): Promise<string> {
        const org = `org-${Math.random().toString(36).slice(2)}`;
        await kiln.call('POST', '/admin/v1/orgs', { body: { name: org } });
        const created = await kiln.call('POST', '/admin/v1/keys', {
          body: { org, limits: { tokens_per_day: tokensPerDay } },
        });
        expect(created.status).toBe(201);
        return created.body.key as string;
      }

      /** How many of `bodies`, sent at once, were admitted (2xx) and refused (429). */
      async function atOnce(key: string, path: string, bodies: Array<Record<string, unknown>>) {
        const answers = await Promise.all(bodies.map((body) => kiln.call('POST', path, { key, body })));
        for (const answer of answers)
          expect([200, 202, 429], JSON.stringify(answer.body)).toContain(answer.status);
        return {
          admitted: answers.filter((a) => a.status < 300).length,
          refused: answers.filter((a) => a.status === 429).length,
        };
      }

      it('requests sent together whose contexts or persona exceed the budget: one is admitted, in every shape', async () => {
        const hi = [{ role: 'user', content: 'hi' }];
        const shapes: Array<[string, Record<string, unknown>]> = [
          [
            '/v1/chat/completions',
            { model: 'm', messages: hi, max_tokens: 8, contexts: ['big'], mode: 'async' },
          ],
          ['/v1/chat/completions', { model: 'm', messages: hi, max_tokens: 8, contexts: ['big'] }],
          ['/v1/chat/completions', { model: 'manual', messages: hi, max_tokens: 8, mode: 'async' }],
          [
            '/v1/responses',
            { model: 'm', input: 'hi', max_output_tokens: 8, contexts: ['big'], background: true },
          ],
        ];
        for (const [path, body] of shapes) {
          // A fresh organisation each: its own budget and its own 8,800-character context.
          const key = await limited(1000);
          const saved = await kiln.call('POST', '/api/v1/contexts', {
            key,
            body: { name: 'big', content: 'Spec line. '.repeat(800) },
          });
          expect(saved.status).toBe(201);
          // Each reserves about 2,200 tokens: the first admitted takes more than the whole budget.
          expect(await atOnce(key, path, Array(5).fill(body)), `${path} ${JSON.stringify(body)}`).toEqual({
            admitted: 1,
            refused: 4,
          });
        }
      });

      it("a request that sets no output limit reserves its persona's default, not limits.default_max_tokens", async () => {
        const hi = [{ role: 'user', content: 'hi' }];
        // limits.default_max_tokens is 1,024: after one such reservation a budget of 500 admits no
        // more, where five of 16 fit; and a budget of 2,000 admits a second 1,024, where the
        // persona's 3,000 (what the engine is asked for) leaves no room.
        for (const [path, body] of [
          ['/v1/chat/completions', { model: 'terse', messages: hi, mode: 'async' }],
          ['/v1/responses', { model: 'terse', input: 'hi', background: true }],
        ] as const) {
          expect(await atOnce(await limited(500), path, Array(5).fill(body)), path).toEqual({
            admitted: 5,
            refused: 0,
          });
        }
        for (const [path, body] of [
          ['/v1/chat/completions', { model: 'verbose', messages: hi, mode: 'async' }],
          ['/v1/responses', { model: 'verbose', input: 'hi', background: true }],
        ] as const) {
          expect(await atOnce(await limited(2000), path, [body, body]), path).toEqual({
            admitted: 1,
            refused: 1,
          });
        }
        // The caller's own limit outranks the persona's.
        const own = { model: 'verbose', messages: hi, max_tokens: 8, mode: 'async' };
        expect(await atOnce(await limited(2000), '/v1/chat/completions', [own, own])).toEqual({
          admitted: 2,
          refused: 0,
        });
      });

      it('a retry with the same Idempotency-Key is the same request, though its context changed size since', async () => {
        const key = await limited(1_000_000);
        const save = (content: string) =>
          kiln.call('POST', '/api/v1/contexts', { key, body: { name: 'notes', content } });
        expect((await save('short')).status).toBe(201);
        const body = {
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          contexts: ['notes'],
          mode: 'async',
        };
        const headers = { 'idempotency-key': 'retry-after-edit' };
        const first = await kiln.call('POST', '/v1/chat/completions', { key, body, headers });
        expect(first.status).toBe(202);
        expect((await save('much longer now. '.repeat(50))).status).toBe(200);
        const again = await kiln.call('POST', '/v1/chat/completions', { key, body, headers });
        expect(again.status, JSON.stringify(again.body)).toBe(202);
        expect(again.body.id).toBe(first.body.id);
      });

      it('responses that continue a conversation reserve the conversation they send again', async () => {
        const key = await limited(1600);
        const first = await kiln.call('POST', '/v1/responses', {
          key,
          body: { model: 'm', input: 'word '.repeat(1200), max_output_tokens: 8 },
        });
        expect(first.status).toBe(200);
        expect(first.body.usage.input_tokens).toBeLessThan(1500);
        // Each next turn sends the first's 6,000 characters again, about 1,500 tokens: one fits.
        const next = { model: 'm', previous_response_id: first.body.id, input: 'and?', max_output_tokens: 8 };
        expect(await atOnce(key, '/v1/responses', Array(4).fill({ ...next, background: true }))).toEqual({
          admitted: 1,
          refused: 3,
        });
      });
    },
  );
}
