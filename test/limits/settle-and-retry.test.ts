import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { closedPort } from '../helpers/ports.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`limits: settling and client retries: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let sims: LlmSim[];

    beforeAll(async () => {
      const quick = await simPool(1);
      const slow = await simPool(1, { decodeMsPerToken: 50 });
      // An engine that streams no usage chunk, whatever `stream_options` asks.
      const mute = await simPool(1, { ignoreStreamOptions: true });
      sims = [...quick, ...slow, ...mute];
      kiln = await startTestServer(storeCase, {
        engines: {
          quick: engine('unique', quick),
          slow: engine('unique', slow, { models: { slow: 'sim-model' } }),
          mute: engine('unique', mute, { models: { mute: 'sim-model' } }),
          down: {
            serves: 'unique',
            replicas: [`http://127.0.0.1:${await closedPort()}`],
            models: { gone: 'x' },
          },
        },
        'jobs.poll_interval_ms': 100,
      });
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await closeAll(sims ?? []);
    });

    async function limited(limits: Record<string, number>) {
      const org = `org-${Math.random().toString(36).slice(2)}`;
      await kiln.call('POST', '/admin/v1/orgs', { body: { name: org } });
      const created = await kiln.call('POST', '/admin/v1/keys', { body: { org, limits } });
      return { key: created.body.key as string, id: created.body.id as string };
    }

    const ended = (key: string, id: string) =>
      waitUntil(
        async () => {
          const job = await kiln.call('GET', `/api/v1/jobs/${id}`, { key });
          return ['completed', 'failed', 'cancelled', 'timeout'].includes(job.body.status)
            ? job.body
            : undefined;
        },
        { timeoutMs: 30_000 },
      );

    /** The ledger's units for a job (prompt + completion tokens), straight from the store. */
    const ledgerTokens = async (uuid: string) => {
      const row = await kiln.server.store.driver.get<{ units: number | string }>(
        'SELECT input_units + output_units AS units FROM usage_ledger WHERE job_id = ?',
        [uuid],
      );
      return Number(row?.units);
    };
    const uuidOf = (publicId: string) => publicId.replace(/^[a-z]+-/, '');

    it('a failed job gives back its reservation, one cancelled while it ran keeps it; the budget counts both so', async () => {
      const { key } = await limited({ tokens_per_day: 100_000 });
      const ask = (model: string, extra: Record<string, unknown> = {}) =>
        kiln.call('POST', '/v1/chat/completions', {
          key,
          body: {
            model,
            messages: [{ role: 'user', content: 'tell me a story' }],
            max_tokens: 400,
            ...extra,
          },
        });

      const running = await ask('slow', { mode: 'async' });
      expect(running.status).toBe(202);
      const held = await kiln.server.store.admissions.get(uuidOf(running.body.id));
      expect(held).toMatchObject({ held: 1 });
      expect(held?.tokens).toBeGreaterThan(400);
      const reserved = held?.tokens as number;
      await waitUntil(
        async () =>
          (await kiln.call('GET', `/api/v1/jobs/${running.body.id}`, { key })).body.status === 'running',
        { timeoutMs: 10_000 },
      );
      expect((await kiln.call('POST', `/api/v1/jobs/${running.body.id}/cancel`, { key })).status).toBe(200);

      const failing = await ask('gone', { mode: 'async' });
      expect(failing.status).toBe(202);
      expect((await ended(key, failing.body.id)).status).toBe('failed');

      const done = await ask('m');
      expect(done.status).toBe(200);
      const real = done.body.usage.prompt_tokens + done.body.usage.completion_tokens;

      for (const id of [failing.body.id, done.body.id]) {
        await ended(key, id);
        const admission = await kiln.server.store.admissions.get(uuidOf(id));
        expect(admission?.held, id).toBe(0);
        expect(admission?.tokens, id).toBe(await ledgerTokens(uuidOf(id)));
      }
      expect((await kiln.server.store.admissions.get(uuidOf(failing.body.id)))?.tokens).toBe(0);
      // Stopped mid-answer, the cancelled job reported no usage (the ledger's 0), though its engine
      // was generating: it counts as its reservation, so cancelling cannot outrun a budget.
      expect(await ledgerTokens(uuidOf(running.body.id))).toBe(0);
      expect(await kiln.server.store.admissions.get(uuidOf(running.body.id))).toMatchObject({
        held: 0,
        tokens: reserved,
      });
      const usage = await kiln.call('GET', '/api/v1/usage', { key });
      expect(usage.body.limits.key.tokens_per_day).toMatchObject({
        limit: 100_000,
        used: real + reserved,
        remaining: 100_000 - real - reserved,
      });
    });

    it('a stream walked away from counts what it relayed, not its reservation, and leaving early does not outrun a budget', async () => {
      const { key } = await limited({ tokens_per_day: 100 });
      const messages = [{ role: 'user', content: 'tell me a long story' }];
      const estimate = Math.ceil(('user'.length + 'tell me a long story'.length) / 4);
      /** A stream left after `wanted` content chunks: its status and the content chunks it got. */
      const stream = async (wanted: number) => {
        const abort = new AbortController();
        const response = await fetch(`${kiln.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'slow', messages, max_tokens: 300, stream: true }),
          signal: abort.signal,
        });
        if (response.status !== 200) return { status: response.status, got: 0 };
        const reader = (response.body as ReadableStream<Uint8Array>).getReader();
        const decoder = new TextDecoder();
        let text = '';
        let got = 0;
        while (got < wanted) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
          got = text.split('\n').filter((line) => /"content":"[^"]/.test(line)).length;
        }
        // Gone mid-answer: the job is cancelled, its engine stopped.
        abort.abort();
        return { status: 200, got };
      };

      const first = await stream(10);
      expect(first.status).toBe(200);
      const [job] = (await kiln.call('GET', '/v1/jobs?limit=1', { key })).body.data;
      expect((await ended(key, job.id)).status).toBe('cancelled');
      expect(await ledgerTokens(uuidOf(job.id))).toBe(0);
      // The prompt's estimate and a token an event relayed, every chunk the client got among them;
      // not the 300 tokens and the estimate reserved.
      const counted = (await kiln.server.store.admissions.get(uuidOf(job.id)))?.tokens as number;
      expect(counted).toBeGreaterThanOrEqual(estimate + first.got);
      expect(counted).toBeLessThan(estimate + 300);

      // Walking away from stream after stream: each counts what it relayed, until the budget is spent.
      let spent = counted;
      let got = first.got;
      let admitted = 1;
      for (let i = 0; i < 30; i++) {
        const next = await stream(10);
        if (next.status === 429) break;
        expect(next.status).toBe(200);
        admitted++;
        got += next.got;
        const [latest] = (await kiln.call('GET', '/v1/jobs?limit=1', { key })).body.data;
        await ended(key, latest.id);
        spent += (await kiln.server.store.admissions.get(uuidOf(latest.id)))?.tokens as number;
      }
      expect(admitted).toBeGreaterThan(1);
      expect(spent).toBeGreaterThanOrEqual(100);
      expect(got).toBeLessThanOrEqual(spent);
      expect((await stream(10)).status).toBe(429);
      const usage = await kiln.call('GET', '/api/v1/usage', { key });
      expect(usage.body.limits.key.tokens_per_day.used).toBe(spent);
    });

    it('an answer whose engine reported no usage still counts: the ledger and the budget get an estimate', async () => {
      const { key } = await limited({ tokens_per_day: 100_000 });
      const prompt = 'tell me a story about a lighthouse';
      const body = { model: 'mute', messages: [{ role: 'user', content: prompt }], max_tokens: 40 };
      const sync = await kiln.call('POST', '/v1/chat/completions', { key, body });
      expect(sync.status).toBe(200);
      // The answer is the engine's: no usage.
      expect(sync.body.usage).toBeUndefined();
      const text = sync.body.choices[0].message.content as string;
      expect(text.length).toBeGreaterThan(0);
      const estimate = Math.ceil(prompt.length / 4) + Math.ceil(text.length / 4);
      expect(await ledgerTokens(uuidOf(sync.body.id))).toBe(estimate);
      expect(await kiln.server.store.admissions.get(uuidOf(sync.body.id))).toMatchObject({
        held: 0,
        tokens: estimate,
      });

      const stream = await fetch(`${kiln.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
      });
      const events = await stream.text();
      expect(events).toContain('data: [DONE]');
      const [job] = (await kiln.call('GET', '/v1/jobs?limit=1', { key })).body.data;
      expect((await ended(key, job.id)).status).toBe('completed');
      const streamed = await ledgerTokens(uuidOf(job.id));
      // The same prompt, so the same answer: the same estimate.
      expect(streamed).toBe(estimate);
      const usage = await kiln.call('GET', '/api/v1/usage', { key });
      expect(usage.body.limits.key.tokens_per_day.used).toBe(2 * estimate);
    });

    it('the official openai client, with its default retries, gets through once the minute window frees room', async () => {
      const { key, id } = await limited({ requests_per_minute: 2 });
      const statuses: number[] = [];
      const client = new OpenAI({
        baseURL: `${kiln.url}/v1`,
        apiKey: key,
        fetch: async (url, init) => {
          const response = await fetch(url, init);
          statuses.push(response.status);
          return response;
        },
      });
      const ask = () =>
        client.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
        });
      await ask();
      await ask();
      expect(statuses).toEqual([200, 200]);
      // As if those two had been made 57 s ago: the window frees its first place in about 3 s.
      await kiln.server.store.driver.run(
        'UPDATE admissions SET created_at = created_at - 57000 WHERE key_id = ?',
        [id],
      );
      const third = await ask();
      expect(third.choices[0]?.message.content).toEqual(expect.any(String));
      expect(statuses[2]).toBe(429);
      expect(statuses.at(-1)).toBe(200);
    });

    it('with a spent budget the openai client gives up at once with a RateLimitError naming budget-exceeded', async () => {
      const { key } = await limited({ tokens_per_day: 1 });
      const statuses: number[] = [];
      const client = new OpenAI({
        baseURL: `${kiln.url}/v1`,
        apiKey: key,
        fetch: async (url, init) => {
          const response = await fetch(url, init);
          statuses.push(response.status);
          return response;
        },
      });
      const ask = () =>
        client.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 4,
        });
      await ask();
      const refused = await ask().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
      expect((refused as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('budget-exceeded');
      expect(statuses).toEqual([200, 429]);
    });
  });
}
