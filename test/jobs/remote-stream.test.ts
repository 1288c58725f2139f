import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { type KilnProcess, killAll, startWorkerProcess } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * Scale-out on PostgreSQL: the gateway holding a stream's request has no worker, so the job is
 * queued and a worker process claims it; the engine's chunks travel back through the store's
 * notifications. The caller, with the official client, must see the same stream a local worker
 * would have given it.
 */

const postgres = storeCases[1] as (typeof storeCases)[number];

/**
 * An engine that writes the JSON of an event over several `data:` lines (valid server-sent
 * events: the lines of one event are joined with a newline), with LF or CRLF line ends.
 */
async function startSplitLinesEngine(): Promise<{ url: string; server: Server }> {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `{"id":"chatcmpl-split","object":"chat.completion.chunk","created":1717171717,"model":"split-model",\n"choices":[{"index":0,"delta":${JSON.stringify(delta)},\n"finish_reason":${JSON.stringify(finish)}}]}`;
  const usage =
    '{"id":"chatcmpl-split","object":"chat.completion.chunk","created":1717171717,"model":"split-model","choices":[],\n"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}';
  const event = (json: string, eol: string) => `data: ${json.split('\n').join(`${eol}data: `)}${eol}${eol}`;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/v1/chat/completions') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          event(chunk({ role: 'assistant', content: 'Hello' }), '\n') +
            event(chunk({ content: ', world' }), '\r\n') +
            event(chunk({}, 'stop'), '\n') +
            event(usage, '\n') +
            'data: [DONE]\n\n',
        );
      } else if (req.url === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'split-model', object: 'model' }] }));
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

const UUID = /^chatcmpl-([0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$/;

describe.skipIf(postgres.skip)(
  `a stream served by a worker in another process: ${caseTitle(postgres)}`,
  () => {
    let gateway: TestServer;
    let worker: KilnProcess;
    let sims: LlmSim[];
    let client: OpenAI;
    let workerDir: string;
    let splitLines: { url: string; server: Server };

    beforeAll(async () => {
      sims = await simPool(1);
      splitLines = await startSplitLinesEngine();
      const fleet = {
        engines: {
          'remote-pool': engine('unique', sims),
          'split-lines': { serves: 'unique', replicas: [splitLines.url], models: { ml: 'split-model' } },
        },
      };
      gateway = await startTestServer(postgres, {
        ...fleet,
        'jobs.workers': 0,
        'jobs.poll_interval_ms': 100,
      });
      // The worker shares the gateway's schema (already migrated) and has the same fleet.
      workerDir = mkdtempSync(path.join(tmpdir(), 'kiln-remote-worker-'));
      const config = path.join(workerDir, 'kiln.yaml');
      writeFileSync(config, JSON.stringify(fleet));
      expect(gateway.server.store.dialect).toBe('postgres');
      worker = await startWorkerProcess({
        KILN_CONFIG: config,
        KILN_DATA_DIR: workerDir,
        KILN_STORE_URL: gateway.server.runtime.config.store.url,
        KILN_STORE_SCHEMA: gateway.server.runtime.config.store.schema,
        KILN_JOBS_WORKERS: '4',
        KILN_JOBS_POLL_INTERVAL_MS: '100',
        KILN_LOG_LEVEL: 'info',
      });
      client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.adminKey, maxRetries: 0 });
    });
    afterAll(async () => {
      await killAll();
      await gateway?.close();
      await closeAll(sims ?? []);
      splitLines?.server.close();
      if (workerDir) rmSync(workerDir, { recursive: true, force: true });
    });

    it('the official client streams every chunk, in order, with Kiln’s id, and the job then polls as completed', async () => {
      const ask = {
        model: 'm',
        messages: [{ role: 'user' as const, content: 'Tell me about kilns, at length.' }],
        max_tokens: 120,
        seed: 11,
      };
      const whole = await client.chat.completions.create(ask);
      const expected = whole.choices[0]?.message.content ?? '';
      expect(expected.length).toBeGreaterThan(100);
      expect(whole.usage?.completion_tokens).toBe(120);

      const { data: stream, response } = await client.chat.completions
        .create({ ...ask, stream: true, stream_options: { include_usage: true } })
        .withResponse();
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      // The route the remote worker took reached this gateway before the first chunk.
      expect(response.headers.get('x-kiln-route')).toMatch(/class=unique; engine=remote-pool; replica=0/);

      const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
      for await (const chunk of stream) chunks.push(chunk);

      expect(chunks.length).toBeGreaterThan(20);
      const id = chunks[0]?.id ?? '';
      expect(id).toMatch(UUID);
      expect(id).not.toBe(whole.id);
      const created = chunks[0]?.created;
      for (const chunk of chunks) {
        expect(chunk).toMatchObject({ id, object: 'chat.completion.chunk', model: 'm', created });
      }
      const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
      expect(text).toBe(expected);
      // One finish reason, on the last chunk with a choice; the usage chunk last of all.
      const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
      expect(finishes.map((c) => c.choices[0]?.finish_reason)).toEqual(['length']);
      expect(chunks.at(-1)?.choices).toEqual([]);
      expect(chunks.at(-1)?.usage).toMatchObject({ completion_tokens: 120 });
      expect(chunks.indexOf(finishes[0] as (typeof chunks)[number])).toBe(chunks.length - 2);

      const uuid = UUID.exec(id)?.[1] as string;
      const polled = await gateway.call('GET', `/api/v1/jobs/${uuid}`);
      expect(polled.status).toBe(200);
      expect(polled.body).toMatchObject({ id, status: 'completed', kind: 'chat' });
      expect(polled.body.result).toMatchObject({ id, model: 'm', created });
      expect(polled.body.result.choices[0].message.content).toBe(expected);
      expect(polled.body.result.choices[0].finish_reason).toBe('length');
    });

    it('the raw event stream: every event parses, ends with [DONE], nothing after it', async () => {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${gateway.adminKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'Another question, 日本語 🔥.' }],
          max_tokens: 60,
          seed: 5,
          stream: true,
        }),
      });
      expect(response.status).toBe(200);
      const body = await response.text();
      expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
      const events = body.split('\n\n').filter((e) => e !== '');
      expect(events.every((e) => e.startsWith('data: ') && !e.includes('\n'))).toBe(true);
      const datas = events.map((e) => e.slice('data: '.length));
      expect(datas.filter((d) => d === '[DONE]')).toHaveLength(1);
      const chunks = datas.slice(0, -1).map((d) => JSON.parse(d));
      // Without include_usage, no usage-only chunk; the finish chunk is the last.
      expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
      expect(chunks.at(-1).choices[0].finish_reason).toBe('length');
      expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
      expect(chunks[0].id).toMatch(UUID);

      const whole = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'Another question, 日本語 🔥.' }],
        max_tokens: 60,
        seed: 5,
      });
      expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(
        whole.choices[0]?.message.content,
      );
    });

    it('several streams at once, each served remotely, each whole', async () => {
      const prompts = Array.from({ length: 6 }, (_, i) => `Question number ${i}: what is a kiln?`);
      const texts = await Promise.all(
        prompts.map(async (content, i) => {
          const stream = await client.chat.completions.create({
            model: 'm',
            messages: [{ role: 'user', content }],
            max_tokens: 40 + i * 10,
            seed: i,
            stream: true,
          });
          let text = '';
          let finish: string | null | undefined;
          for await (const chunk of stream) {
            text += chunk.choices[0]?.delta.content ?? '';
            finish ??= chunk.choices[0]?.finish_reason;
          }
          expect(finish).toBe('length');
          return text;
        }),
      );
      const wholes = await Promise.all(
        prompts.map((content, i) =>
          client.chat.completions.create({
            model: 'm',
            messages: [{ role: 'user', content }],
            max_tokens: 40 + i * 10,
            seed: i,
          }),
        ),
      );
      expect(texts).toEqual(wholes.map((w) => w.choices[0]?.message.content));
      expect(worker.lines.some((l) => l.level === 50)).toBe(false);
    });

    it('an engine that splits an event over several data: lines: the caller gets one valid event per chunk', async () => {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${gateway.adminKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'ml', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      expect(response.status).toBe(200);
      const body = await response.text();
      // Every event is one `data:` line of JSON (or [DONE]): a line of JSON without `data:` is lost
      // to every SSE parser, and the event's data cut short of its JSON.
      const events = body.split('\n\n').filter((e) => e !== '');
      expect(events.at(-1)).toBe('data: [DONE]');
      for (const event of events) {
        expect(event, JSON.stringify(event)).toMatch(/^data: [^\n]*$/);
        if (event !== 'data: [DONE]') expect(() => JSON.parse(event.slice(6)), event).not.toThrow();
      }

      const stream = await client.chat.completions.create({
        model: 'ml',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      let text = '';
      const finishes: Array<string | null | undefined> = [];
      for await (const chunk of stream) {
        expect(chunk.id).toMatch(UUID);
        expect(chunk.model).toBe('ml');
        text += chunk.choices[0]?.delta.content ?? '';
        finishes.push(chunk.choices[0]?.finish_reason);
      }
      expect(text).toBe('Hello, world');
      expect(finishes.at(-1)).toBe('stop');
    });

    it('an async job cancelled at this gateway while the worker runs it keeps the route the worker took', async () => {
      const submitted = await gateway.call('POST', '/v1/chat/completions', {
        body: {
          model: 'm',
          mode: 'async',
          max_tokens: 4000,
          messages: [{ role: 'user', content: 'Tell me everything about kilns.' }],
        },
      });
      expect(submitted.status).toBe(202);
      const [sim] = sims as [LlmSim];
      const deadline = Date.now() + 10_000;
      while (sim.stats().running === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(sim.stats().running).toBe(1);

      const cancelled = await gateway.call('POST', `/v1/jobs/${submitted.body.id}/cancel`);
      expect(cancelled.body).toMatchObject({ status: 'cancelled' });
      // The cancel reached the worker, which stopped the engine and keeps where it ran.
      let route: unknown = null;
      while (route === null && Date.now() < deadline) {
        const details = await gateway.call('GET', `/api/v1/jobs/${submitted.body.id}/details`);
        route = details.body.route;
        if (route === null) await new Promise((r) => setTimeout(r, 50));
      }
      expect(route).toMatchObject({ class: 'unique', engine: 'remote-pool', replica: 0 });
      while (sim.stats().running > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(sim.stats().running).toBe(0);
      expect((await gateway.call('GET', `/v1/jobs/${submitted.body.id}`)).body.status).toBe('cancelled');
    });
  },
);
