import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OpenAICompatibleAdapter } from '../../src/engines/openai/adapter.js';
import { type ChatChunk, EngineError, type ReplicaTarget } from '../../src/engines/types.js';
import { REPO_ROOT } from '../helpers/process.js';

/**
 * The OpenAI-compatible adapter against the exact bytes a real llama.cpp server sent
 * (../shared/reference/recordings/llamacpp): a local server answers each request with a recorded
 * answer, read for read, and the adapter must make of it what the recording says.
 */

const dir = path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'llamacpp');
const recording = (name: string) => JSON.parse(readFileSync(path.join(dir, name), 'utf8'));

interface RecordedResponse {
  status: number;
  headers: Record<string, string>;
  body?: unknown;
  raw_chunks?: { base64: string }[];
}

/** The answer the local server gives next, and how to cut its bytes into writes. */
let answer: { response: RecordedResponse; reads?: Buffer[] } | undefined;
let server: Server;
let url: string;
let lastBody: Record<string, unknown> | undefined;

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8').on('data', (piece: string) => {
      text += piece;
    });
    req.on('end', async () => {
      lastBody = JSON.parse(text || '{}');
      const recorded = answer?.response as RecordedResponse;
      const headers = { ...recorded.headers };
      delete headers['content-length'];
      delete headers['transfer-encoding'];
      res.writeHead(recorded.status, headers);
      const reads = answer?.reads ??
        recorded.raw_chunks?.map((c) => Buffer.from(c.base64, 'base64')) ?? [
          Buffer.from(JSON.stringify(recorded.body)),
        ];
      for (const read of reads) {
        res.write(read);
        await new Promise((r) => setTimeout(r, 2));
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

const adapter = new OpenAICompatibleAdapter();
afterEach(() => {
  answer = undefined;
});
afterAll(() => adapter.close());

const replica = (): ReplicaTarget => ({
  url,
  label: 'llama replica 0',
  apiKey: undefined,
  timeoutMs: 5000,
  connectTimeoutMs: 1000,
  maxConcurrency: 4,
  healthPath: '/health',
});

const call = (body: Record<string, unknown>, onChunk?: (chunk: ChatChunk) => void) =>
  adapter.chat(replica(), { body, signal: AbortSignal.timeout(5000), ...(onChunk ? { onChunk } : {}) });

describe('the OpenAI-compatible adapter replaying a real llama.cpp', () => {
  it('asks every engine to stream, with usage', async () => {
    const exchange = recording('chat-stream-include-usage.json');
    answer = { response: exchange.response };
    await call(exchange.request.body);
    expect(lastBody).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it('folds a recorded stream into the completion, keeping usage, timings and system_fingerprint', async () => {
    const exchange = recording('chat-stream-include-usage.json');
    answer = { response: exchange.response };
    const chunks: ChatChunk[] = [];
    const completion = await call(exchange.request.body, (chunk) => chunks.push(chunk));
    const events = (exchange.response.sse_events as string[])
      .map((e) => e.replace(/^data: /, '').trim())
      .filter((e) => e !== '[DONE]')
      .map((e) => JSON.parse(e));
    expect(chunks).toEqual(events);
    const content = events.flatMap((e) =>
      e.choices.map((c: { delta: { content?: string } }) => c.delta.content ?? ''),
    );
    const last = events.at(-1);
    expect(completion).toMatchObject({
      object: 'chat.completion',
      system_fingerprint: 'b11669-Debian',
      usage: last.usage,
      timings: last.timings,
      choices: [
        { index: 0, message: { role: 'assistant', content: content.join('') }, finish_reason: 'length' },
      ],
    });
  });

  it('a caller that takes content alone gets every chunk once, in order, and the same completion', async () => {
    const exchange = recording('chat-stream-include-usage.json');
    answer = { response: exchange.response };
    const expected = await call(exchange.request.body);
    answer = { response: exchange.response };
    const texts: string[] = [];
    let contentOnly = 0;
    const completion = await adapter.chat(replica(), {
      body: exchange.request.body,
      signal: AbortSignal.timeout(5000),
      onChunk: (_chunk, text) => texts.push(text),
      onContent: (content, body, shape) => {
        contentOnly++;
        // The engine's text is the shape's around the content's JSON text.
        const text = shape.before + body + shape.after;
        texts.push(text);
        // What the text says, but for the content, is the chunk it repeats.
        const chunk = JSON.parse(text) as ChatChunk;
        expect(chunk.choices[0]?.delta).toEqual({ content });
        expect({ ...chunk, choices: [] }).toEqual({ ...shape.like, choices: [] });
        expect(chunk.choices[0]?.index).toBe(shape.like.choices[0]?.index);
      },
    });
    const events = (exchange.response.sse_events as string[])
      .map((e) => e.replace(/^data: /, '').trim())
      .filter((e) => e !== '[DONE]');
    expect(texts).toEqual(events);
    expect(contentOnly).toBeGreaterThan(2);
    expect(completion).toEqual(expected);
  });

  it('keeps timings that ride on the finish chunk when there is no usage chunk', async () => {
    const exchange = recording('chat-stream-no-usage.json');
    answer = { response: exchange.response };
    const completion = await call(exchange.request.body);
    expect(completion.timings).toMatchObject({ predicted_n: expect.any(Number) });
    expect(completion.choices[0]?.finish_reason).toBe('length');
  });

  it('decodes a character split across two network reads whole', async () => {
    const exchange = recording('chat-stream-with-role-chunk.json');
    const bytes = Buffer.concat(
      (exchange.response.raw_chunks as { base64: string }[]).map((c) => Buffer.from(c.base64, 'base64')),
    );
    // Put a multi-byte character into a text chunk, then cut the bytes in the middle of it.
    const text = bytes.toString('utf8').replace(/"content":"([^"]*)"/, '"content":"h\u00e9llo \u{1f30d}$1"');
    const whole = Buffer.from(text, 'utf8');
    const globe = whole.indexOf(Buffer.from('\u{1f30d}', 'utf8'));
    expect(globe).toBeGreaterThan(0);
    answer = {
      response: exchange.response,
      reads: [whole.subarray(0, globe + 2), whole.subarray(globe + 2, globe + 3), whole.subarray(globe + 3)],
    };
    const completion = await call(exchange.request.body);
    expect(completion.choices[0]?.message.content).toContain('h\u00e9llo \u{1f30d}');
    expect(completion.choices[0]?.message.content).not.toContain('\ufffd\ufffd');
  });

  it('takes a whole JSON answer from an engine that did not stream, every choice of n = 2 included', async () => {
    const exchange = recording('chat-n2.json');
    answer = { response: exchange.response };
    const completion = await call(exchange.request.body);
    expect(completion.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(completion.usage).toEqual(exchange.response.body.usage);
  });

  it('an engine’s 400 is a refusal in its own words, with its fields, and never “retryable”', async () => {
    const exchange = recording('error-context-exceeded.json').context_exceeded_stream;
    answer = { response: { ...exchange.response, raw_chunks: undefined } };
    const error = await call(exchange.request.body).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    const refusal = error as EngineError;
    expect(refusal).toMatchObject({
      kind: 'rejected',
      status: 400,
      contextLength: true,
      message: 'request (25316 tokens) exceeds the available context size (4096 tokens), try increasing it',
      engineFields: { type: 'exceed_context_size_error', n_prompt_tokens: 25316, n_ctx: 4096 },
    });
    expect(refusal.retryable).toBe(false);
    for (const [name, bad] of Object.entries(recording('error-bad-request.json')) as [
      string,
      { request: { body: unknown }; response: RecordedResponse & { body: { error: { message: string } } } },
    ][]) {
      if (name === 'unknown_route' || name === 'invalid_json_body') continue;
      answer = { response: { ...bad.response, raw_chunks: undefined } };
      const failed = (await call(bad.request.body as Record<string, unknown>).catch(
        (e: unknown) => e,
      )) as EngineError;
      expect(failed.kind).toBe('rejected');
      expect(failed.message).toBe(bad.response.body.error.message);
      expect(failed.contextLength).toBe(false);
    }
  });
});
