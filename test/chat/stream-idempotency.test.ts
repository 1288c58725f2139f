import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { closeAll, engine, settledJob, simPool, until } from './fleet.js';

/**
 * An Idempotency-Key on a chat stream (DESIGN: on any POST that creates work): a retry of a stream
 * that completed gets that answer again as a stream, without another job or engine call; one
 * while it runs is told so; one of a request whose caller went away, which cancelled it, runs it
 * again. A sync request whose caller went away frees its key the same way.
 */
for (const store of storeCases) {
  describe.skipIf(store.skip)(`Idempotency-Key on chat streams (${store.name})`, () => {
    let kiln: TestServer;
    let sims: LlmSim[];
    let client: OpenAI;
    let n = 0;
    const newKey = () => `stream-key-${++n}-${Date.now()}`;

    beforeAll(async () => {
      // 20 ms a token: a 60-token answer runs for 1.2 s, long enough to act while it runs.
      sims = await simPool(1, { decodeMsPerToken: 20 });
      kiln = await startTestServer(store, {
        engines: { pool: engine('unique', sims) },
        'jobs.poll_interval_ms': 50,
      });
      client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
    });
    afterAll(async () => {
      await kiln?.close();
      await closeAll(sims ?? []);
    });

    const chatJobs = async () => (await kiln.call('GET', '/v1/jobs?kind=chat&limit=100')).body.data.length;
    const body = (words: string, maxTokens = 60) => ({
      model: 'm',
      messages: [{ role: 'user' as const, content: `Tell me about ${words}.` }],
      max_tokens: maxTokens,
      stream: true as const,
    });

    /** The request by plain fetch, with the key, so that the test can walk away from it. */
    const post = (request: object, key: string, signal: AbortSignal) =>
      fetch(`${kiln.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${kiln.adminKey}`,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: JSON.stringify(request),
        signal,
      });

    /** A stream through the openai client: its id, text, usage and the response's headers. */
    async function streamed(request: ReturnType<typeof body>, key: string, includeUsage = false) {
      const { data, response } = await client.chat.completions
        .create(
          { ...request, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) },
          { headers: { 'Idempotency-Key': key } },
        )
        .withResponse();
      let id = '';
      let text = '';
      let usage: unknown;
      let finish: string | null | undefined;
      // Each chunk's usage: n for null, - for none, u for counts.
      let usages = '';
      for await (const chunk of data) {
        usages += chunk.usage === null ? 'n' : chunk.usage === undefined ? '-' : 'u';
        id ||= chunk.id;
        text += chunk.choices[0]?.delta.content ?? '';
        finish ??= chunk.choices[0]?.finish_reason;
        if (chunk.usage) usage = chunk.usage;
      }
      return { id, text, usage, usages, finish, replayed: response.headers.get('idempotent-replayed') };
    }

    it('a completed stream retried with its key is answered again, whole, without another job or engine call', async () => {
      for (const includeUsage of [false, true]) {
        const key = newKey();
        const request = body(`kilns ${includeUsage}`);
        const first = await streamed(request, key, includeUsage);
        expect(first.text.length).toBeGreaterThan(0);
        expect(first.replayed).toBeNull();
        const jobs = await chatJobs();
        const generated = sims[0]?.stats().generationTokens;

        const again = await streamed(request, key, includeUsage);
        expect(again.replayed).toBe('true');
        expect(again).toMatchObject({
          id: first.id,
          text: first.text,
          finish: first.finish,
          usage: first.usage,
        });
        expect(first.usage === undefined).toBe(!includeUsage);
        // As OpenAI's: asked for, usage is null on every chunk but the last, the first time and again.
        for (const { usages } of [first, again]) expect(usages).toMatch(includeUsage ? /^n+u$/ : /^-+$/);
        expect(await chatJobs()).toBe(jobs);
        expect(sims[0]?.stats().generationTokens).toBe(generated);
      }
    });

    it('the same key with another body is 422; while the first stream runs, 409 with its polling URL', async () => {
      const key = newKey();
      const running = streamed(body('glazes'), key);
      await until(
        async () => (await kiln.call('GET', '/v1/jobs?kind=chat&status=running')).body.data.length > 0,
        5000,
        'the first stream to run',
      );
      const during = await kiln.call('POST', '/v1/chat/completions', {
        body: body('glazes'),
        headers: { 'idempotency-key': key },
      });
      expect(during.status).toBe(409);
      expect(during.body.error.code).toBe('idempotency-key-in-progress');
      expect(during.body.polling_url).toMatch(/^\/api\/v1\/jobs\/[0-9a-f-]{36}$/);
      const other = await kiln.call('POST', '/v1/chat/completions', {
        body: body('clay'),
        headers: { 'idempotency-key': key },
      });
      expect([other.status, other.body.error.code]).toEqual([422, 'idempotency-key-reused']);
      const first = await running;
      expect((await streamed(body('glazes'), key)).text).toBe(first.text);
    });

    it('a stream whose caller went away is cancelled and frees its key: the retry runs it again, whole', async () => {
      const key = newKey();
      const request = body('firing schedules');
      const abort = new AbortController();
      const response = await post(request, key, abort.signal);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      abort.abort();
      expect((await settledJob(kiln, kiln.adminKey)).status).toBe('cancelled');
      const jobs = await chatJobs();

      const retry = await streamed(request, key);
      expect(retry.replayed).toBeNull();
      expect(retry.finish).toBe('length');
      expect(retry.text.split(' ').length).toBeGreaterThan(1);
      expect(await chatJobs()).toBe(jobs + 1);
      // And now the key holds the retry's job.
      expect((await streamed(request, key)).replayed).toBe('true');
    });

    it('a sync request whose caller went away frees its key too: the retry gets an answer, not "cancelled"', async () => {
      const key = newKey();
      const request = { ...body('kiln wash'), stream: false };
      const abort = new AbortController();
      const first = post(request, key, abort.signal).catch((error: Error) => error);
      await until(
        async () => (await kiln.call('GET', '/v1/jobs?kind=chat&status=running')).body.data.length > 0,
        5000,
        'the sync request to run',
      );
      abort.abort();
      expect(await first).toBeInstanceOf(Error);
      const abandoned = await settledJob(kiln, kiln.adminKey);
      expect(abandoned).toMatchObject({
        status: 'cancelled',
        message: 'the job was cancelled: its caller went away before the answer',
      });

      const retry = await kiln.call('POST', '/v1/chat/completions', {
        body: request,
        headers: { 'idempotency-key': key },
      });
      expect(retry.status, JSON.stringify(retry.body)).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(retry.body.choices[0].finish_reason).toBe('length');
    });

    it('a retry that comes after the cancel but before the key is freed runs the request again too', async () => {
      const key = newKey();
      const request = { ...body('kiln shelves'), stream: false };
      const abort = new AbortController();
      const first = post(request, key, abort.signal).catch((error: Error) => error);
      const { store } = kiln.server;
      let bound: Record<string, unknown> | undefined;
      await until(
        async () => {
          [bound] = await store.driver.all('SELECT * FROM idempotency_keys WHERE idem_key = ?', [key]);
          return bound !== undefined;
        },
        5000,
        'the key to be bound',
      );
      abort.abort();
      expect(await first).toBeInstanceOf(Error);
      expect((await settledJob(kiln, kiln.adminKey)).status).toBe('cancelled');
      // The moment between the cancel's commit and the key's release, held open: the key bound again.
      await store.driver.run(
        'INSERT INTO idempotency_keys (org_id, idem_key, request_hash, job_id, created_at) VALUES (?, ?, ?, ?, ?)',
        [bound?.org_id, key, bound?.request_hash, bound?.job_id, bound?.created_at],
      );

      const retry = await kiln.call('POST', '/v1/chat/completions', {
        body: request,
        headers: { 'idempotency-key': key },
      });
      expect(retry.status, JSON.stringify(retry.body)).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      const [rebound] = await store.driver.all<{ job_id: string }>(
        'SELECT job_id FROM idempotency_keys WHERE idem_key = ?',
        [key],
      );
      expect(rebound?.job_id).not.toBe(bound?.job_id);
      expect(retry.body.id).toBe(`chatcmpl-${rebound?.job_id}`);
    });
  });
}
