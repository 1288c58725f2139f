import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/engines/types.js';
import { cut, cuts } from '../../src/responses/truncation.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { takeEvents } from './take.js';

/**
 * `truncation: "auto"`: a conversation continued by previous_response_id that has outgrown the
 * engine's context drops its oldest turns until it fits, as OpenAI's does; `disabled`, the default,
 * is the engine's refusal. The simulated replica holds 2,048 tokens, about a word each.
 */
describe.each(storeCases)('truncation on the Responses API ($name)', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;
  const words = (topic: string, n: number) => `${topic} ${'word '.repeat(n)}`;

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1, { contextWindow: 2048 });
    kiln = await startTestServer(storeCase, { engines: { pool: engine('unique', sims) } });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
  });

  /**
   * Three turns of about 700 words each, the first opened by a developer message of 300: together
   * more than the context holds (the third turn is cut already).
   */
  async function longConversation(): Promise<string> {
    let previous: string | undefined;
    for (const topic of ['clay', 'glaze', 'kilns']) {
      const turn = await client.responses.create({
        model: 'm',
        input: [
          ...(previous ? [] : [{ role: 'developer' as const, content: words('rules', 300) }]),
          { role: 'user' as const, content: words(topic, 700) },
        ],
        max_output_tokens: 16,
        truncation: 'auto',
        ...(previous ? { previous_response_id: previous } : {}),
      });
      expect(turn.status).toBe('incomplete');
      previous = turn.id;
    }
    return previous as string;
  }

  it.skipIf(storeCase.skip)(
    'auto: the oldest turns go until the conversation fits; disabled: the engine refuses it, naming input',
    async () => {
      const previous = await longConversation();
      const next = {
        model: 'm',
        input: 'And firing?',
        max_output_tokens: 16,
        previous_response_id: previous,
      };

      const refused = await kiln.call('POST', '/v1/responses', { body: next });
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 'engine-rejected', param: 'input' });

      const answered = await client.responses.create({ ...next, truncation: 'auto' });
      expect(answered.status).toBe('incomplete');
      expect(answered.truncation).toBe('auto');
      expect(answered.output_text.length).toBeGreaterThan(0);
      // What went: the first turn's exchange; the developer message that opened the conversation,
      // the last two turns and this input stayed, about 1,750 of the 2,048 tokens.
      expect(answered.usage?.input_tokens).toBeGreaterThan(1700);
      expect(answered.usage?.input_tokens).toBeLessThan(2048);
      // The conversation as stored is whole: its input items are this turn's.
      const items = await client.responses.inputItems.list(answered.id);
      expect(items.data.map((item) => (item as { content?: unknown }).content)).toEqual([
        [{ type: 'input_text', text: 'And firing?' }],
      ]);

      // Streamed alike.
      const events = await takeEvents(
        await client.responses.create({ ...next, truncation: 'auto', stream: true }),
      );
      expect(events.at(-1)?.type).toBe('response.incomplete');
    },
  );

  it.skipIf(storeCase.skip)('auto: an input that does not fit alone is still refused', async () => {
    const refused = await kiln.call('POST', '/v1/responses', {
      body: { model: 'm', input: words('alone', 3000), truncation: 'auto' },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({ code: 'engine-rejected', param: 'input' });
  });

  it.skipIf(storeCase.skip)(
    'truncation is auto, disabled or null; anything else is a 400 naming it',
    async () => {
      const refused = await kiln.call('POST', '/v1/responses', {
        body: { model: 'm', input: 'hi', truncation: 'sometimes' },
      });
      expect(refused.status).toBe(400);
      expect(refused.body.error.param).toBe('truncation');
      const plain = await client.responses.create({ model: 'm', input: 'hi', max_output_tokens: 16 });
      expect(plain.truncation).toBe('disabled');
    },
  );
});

describe('where a conversation may be cut, and what it keeps', () => {
  it('keeps the system messages it opened with, and says where each kept message was', () => {
    const m = (role: string, content: string) => ({ role, content }) as ChatMessage;
    const all = [m('system', 's'), m('user', 'a'), m('assistant', 'b'), m('user', 'c'), m('assistant', 'd')];
    const { kept, origin } = cut(all, 3);
    expect(kept.map((k) => k.content)).toEqual(['s', 'c', 'd']);
    expect([0, 1, 2].map(origin)).toEqual([0, 3, 4]);
    expect(cut(all, 0).kept).toEqual(all);
  });

  const m = (role: string) => ({ role, content: 'x' }) as never;
  it('before user messages only, dropping about twice as many turns each try, and last the newest alone', () => {
    const turns = [m('system'), m('user'), m('assistant'), m('user'), m('assistant'), m('tool')];
    expect(cuts(turns)).toEqual([3]);
    expect(cuts([m('system'), m('user'), m('user')])).toEqual([2]);
    // A turn's own system message (a developer item) goes, or stays, with its user message.
    expect(cuts([m('system'), m('user'), m('assistant'), m('system'), m('user')])).toEqual([3]);
    const devs = [
      m('system'),
      m('user'),
      m('assistant'),
      m('system'),
      m('user'),
      m('assistant'),
      m('system'),
      m('user'),
    ];
    expect(cuts(devs as never)).toEqual([3, 6]);
    const many = [m('user'), ...Array.from({ length: 10 }, (_, i) => [m('assistant'), m('user')][i % 2])];
    // Users at 2, 4, 6, 8, 10: the first, second and fourth of them, then the newest.
    expect(cuts(many as never)).toEqual([2, 4, 8, 10]);
    expect(cuts([m('user')])).toEqual([]);
  });
});
