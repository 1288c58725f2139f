import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * Kiln in front of the exact bytes a real llama.cpp server sent (../shared/reference/recordings),
 * through the `openai` client as a caller uses it: what the recording's engine says, the caller
 * gets in OpenAI's shape, whatever the simulator would have said instead.
 */

const dir = path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'llamacpp');
/** A recorded answer: `file`, or `file#case` for a file of several exchanges. */
const recording = (name: string) => {
  const [file, exchange] = name.split('#') as [string, string | undefined];
  const recorded = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
  return (exchange ? recorded[exchange] : recorded).response as {
    status: number;
    headers: Record<string, string>;
    body?: unknown;
    raw_chunks?: { base64: string }[];
  };
};

/** Every chat completion is answered with this recording, read for read. */
let chat = 'chat-stream-include-usage.json';

let engine: Server;
let kiln: TestServer;
let client: OpenAI;

beforeAll(async () => {
  engine = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      const name =
        req.method === 'POST'
          ? chat
          : ({ '/health': 'get-health.json', '/v1/models': 'get-v1-models.json', '/props': 'get-props.json' }[
              req.url ?? ''
            ] ?? undefined);
      if (!name) {
        res.writeHead(404).end();
        return;
      }
      const recorded = recording(name);
      const headers = { ...recorded.headers };
      delete headers['content-length'];
      delete headers['transfer-encoding'];
      res.writeHead(recorded.status, headers);
      for (const read of recorded.raw_chunks?.map((c) => Buffer.from(c.base64, 'base64')) ?? [
        Buffer.from(JSON.stringify(recorded.body)),
      ]) {
        res.write(read);
        await new Promise((r) => setTimeout(r, 2));
      }
      res.end();
    });
  });
  await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
  kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
    engines: { llama: { serves: 'unique', replicas: [url], models: { m: 'tiny' } } },
  });
  client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
});
afterAll(async () => {
  await kiln?.close();
  await new Promise((resolve) => engine?.close(resolve));
});

describe('a recorded llama.cpp engine behind Kiln, through the openai client', () => {
  it.each(['chat-stream-include-usage.json', 'chat-stream-no-usage.json'])(
    'a stream that starts with content (%s) reaches the caller with its role first',
    async (name) => {
      chat = name;
      const request = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 12 };
      const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
      for await (const chunk of await client.chat.completions.create({ ...request, stream: true }))
        chunks.push(chunk);
      expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
      expect(chunks.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
      const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
      expect(text.length).toBeGreaterThan(0);

      // The client's stream helper, which needs each choice's role, assembles the same answer.
      const final = await client.chat.completions.stream(request).finalChatCompletion();
      expect(final.choices[0]?.message).toMatchObject({ role: 'assistant', content: text });
      expect(final.choices[0]?.finish_reason).toBe('length');
    },
  );

  it.each([
    ['error-bad-request.json#bad_response_format_type', 'body', null, /response_format type must be one of/],
    [
      'error-context-exceeded.json#context_exceeded_sync',
      'messages',
      'messages',
      /exceeds the available context size/,
    ],
  ])(
    'a refusal (%s) is the engine’s words and names the field it concerns; param only a field (%s, %s)',
    async (name, field, param, words) => {
      chat = name;
      const refused = await kiln.call('POST', '/v1/chat/completions', {
        body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
      });
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({
        code: 'engine-rejected',
        param,
        message: expect.stringMatching(words),
      });
      expect(refused.body.error.details[0]).toMatchObject({ field, rule: expect.any(String) });
      const error = await client.chat.completions
        .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(words);
    },
  );

  it('a stream that sends its role chunk keeps just that one', async () => {
    chat = 'chat-stream-with-role-chunk.json';
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
      stream: true,
    }))
      chunks.push(chunk);
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: null });
    expect(chunks.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
  });
});
