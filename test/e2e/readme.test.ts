import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, waitUntil } from '../helpers/process.js';
import { probeClipboard, readClipboardBytes, startXvfb, writeClipboard, type Xvfb } from '../helpers/xvfb.js';
import {
  commandsOf,
  fill,
  type Gateway,
  makeClone,
  NPX_KILN,
  type ReadmeExample,
  readmeExample,
  readmeExamples,
  readmeShell,
  startGateway,
} from './readme-examples.js';

/**
 * README.md's examples, each in a test of its own and in README order, run as written — the lines
 * are read from README.md when the test runs — against the gateway the README starts: `npm start`
 * in a directory laid out like a clone, with no kiln.yaml, which is `kiln dev`. Each test picks up
 * where the one before it left off, as a reader would: the admin key exported, the contexts saved.
 *
 * What a test changes in a line: the gateway's address (a free port, not 8080), `npx kiln` (run as
 * `node bin/kiln.js`, see NPX_KILN), and each placeholder (`<file_id>`, `key_0193…`), filled with
 * what an earlier step answered. Curl commands get `-w '\n%{http_code}'` appended, for the status.
 *
 * Left out, and why (LEFT_OUT; the first test checks it and the tests below against README.md):
 * - the `npm ci` of `npm ci && npm start`: the suite runs on the installed node_modules, and a
 *   reinstall needs the registry (the `npm start` half starts the gateway here);
 * - `npm ci && npm test`: that is the whole suite, this test included;
 * - the `text` block under "Prerequisites for the full test suite": output of `npm test`, not a command;
 * - the `src/` tree under "Working on Kiln": a layout, not a command.
 * Commands in the prose rather than in a block (`npx kiln migrate`, `npx kiln sim llm`, `kill -HUP`,
 * `npm run check`, …) are not examples here.
 *
 * Without Xvfb and xclip (see test/helpers/xvfb.ts) the two clipboard lines of the context-store
 * block run without a display, and the test checks what the README says happens then instead.
 */

const LEFT_OUT = [
  { section: 'Run it', start: 'npm ci && npm test' },
  { section: 'Prerequisites for the full test suite', start: 'Skipped, and why:' },
  { section: 'Working on Kiln', start: 'src/' },
];

/** The examples the tests below run, in the order they are declared. */
const covered: { section: string; start: string }[] = [];

/** A test of the README's example under `section` whose title starts with `start`. */
function example(section: string, start: string, name: string, body: (ex: ReadmeExample) => Promise<void>) {
  covered.push({ section, start });
  it(name, () => body(readmeExample(section, start)));
}

const clipboard = probeClipboard();
const clone = makeClone();
let gateway: Gateway;
/** The admin key, once the reader has exported it. */
let key = '';
const sh = readmeShell(
  clone.dir,
  () => gateway.url,
  (): Record<string, string> => (key ? { KILN_API_KEY: key, KILN_BASE_URL: gateway.url } : {}),
);

/** A command that must exit 0; its stdout. */
async function ok(command: string): Promise<string> {
  const { code, stdout, stderr } = await sh(command);
  expect(code, `${command}\n${stderr}`).toBe(0);
  return stdout;
}

/** A README curl, with the status appended to its output. */
async function curl(command: string): Promise<{ status: number; body: string; json: () => any }> {
  const stdout = await ok(`${command} -w '\\n%{http_code}'`);
  const at = stdout.lastIndexOf('\n');
  const body = stdout.slice(0, at);
  return { status: Number(stdout.slice(at + 1)), body, json: () => JSON.parse(body) };
}

/** The HTTP API, for what a step needs that is not the README's to show (a job still running). */
async function api(route: string, init: { method?: string; body?: unknown; key?: string } = {}) {
  const authorization = `Bearer ${init.key ?? key}`;
  const answer = await fetch(
    `${gateway.url}${route}`,
    init.body === undefined
      ? { method: init.method ?? 'GET', headers: { authorization } }
      : {
          method: init.method ?? 'POST',
          headers: { authorization, 'content-type': 'application/json' },
          body: JSON.stringify(init.body),
        },
  );
  return { status: answer.status, body: (await answer.json()) as any };
}

/** A chat job that decodes for about 100 s, running: what `cancel` needs (the README's end in a blink). */
async function runningChatJob(): Promise<string> {
  const submitted = await api('/v1/chat/completions', {
    body: {
      model: 'assistant',
      mode: 'async',
      max_tokens: 20_000,
      messages: [{ role: 'user', content: 'Go on' }],
    },
  });
  expect(submitted.status).toBe(202);
  const id = submitted.body.id as string;
  await waitUntil(async () => (await api(`/v1/jobs/${id}`)).body.status === 'running', { timeoutMs: 10_000 });
  return id;
}

/** The job a README poll line answers, re-run (as a reader would) until the job has ended. */
async function pollUntilEnded(command: string): Promise<any> {
  return waitUntil(
    async () => {
      const job = (await curl(command)).json();
      return job.status === 'queued' || job.status === 'running' ? undefined : job;
    },
    { timeoutMs: 15_000, intervalMs: 100 },
  );
}

beforeAll(async () => {
  const [install, start] = readmeExample('Run it', 'npm ci && npm start').text.trim().split(' && ');
  expect(install).toBe('npm ci');
  gateway = await startGateway(start as string, clone.dir);
});

afterAll(async () => {
  await gateway?.stop();
  clone.remove();
});

it('README.md: every example has a test below, in README order, or is left out for a reason given above', () => {
  const named = (e: { section: string; start: string }) => `${e.section} › ${e.start}`;
  const inReadme = readmeExamples().map((e) => {
    const found = [...covered, ...LEFT_OUT].find(
      (c) => c.section === e.section && e.title.startsWith(c.start),
    );
    return found ? named(found) : `no test: ${e.section} › ${e.title}`;
  });
  const leftOut = new Set(LEFT_OUT.map(named));
  expect(inReadme.filter((e) => !leftOut.has(e))).toEqual(covered.map(named));
  expect(inReadme.filter((e) => leftOut.has(e))).toEqual(LEFT_OUT.map(named));
});

describe('Run it', () => {
  example(
    'Run it',
    'npm ci && npm start',
    'npm start (no kiln.yaml: kiln dev) serves on SQLite under ./data with the simulated fleet',
    async () => {
      expect(statSync(path.join(clone.dir, 'data', 'kiln.db')).isFile()).toBe(true);
      const banner = gateway.output();
      // Five engine replicas in three pools, and a ComfyUI runner with every image and video model.
      expect(
        banner.match(/^ {2}(prefix-pool|unique-pool|long-context) +http:\/\/127\.0\.0\.1:\d+$/gm),
      ).toHaveLength(5);
      expect(banner).toMatch(/^ {2}comfyui +http:\/\/\S+ +\(wan-2\.2, ltx-video, ltx-2\.3, sdxl\)$/m);
      const models = await fetch(`${gateway.url}/v1/models`, {
        headers: {
          authorization: `Bearer ${readFileSync(path.join(clone.dir, 'data', 'admin.key'), 'utf8').trim()}`,
        },
      });
      const ids = ((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id);
      expect(ids).toEqual(expect.arrayContaining(['assistant', 'support', 'llama-3-8b']));
    },
  );
});

describe('The admin key', () => {
  example(
    'The admin key',
    'export KILN_API_KEY=$(cat data/admin.key)',
    'export KILN_API_KEY from data/admin.key (mode 0600; the log names the file, never the key)',
    async (ex) => {
      const keyFile = path.join(clone.dir, 'data', 'admin.key');
      expect(statSync(keyFile).mode & 0o777).toBe(0o600);
      key = (await ok(`${ex.text}\nprintf %s "$KILN_API_KEY"`)).trim();
      expect(key).toMatch(/^kiln_sk_[0-9A-Za-z]{32}$/);
      expect(key).toBe(readFileSync(keyFile, 'utf8').trim());
      expect(gateway.output()).toContain(`Admin key: ${keyFile}`);
      expect(gateway.output()).not.toContain(key);
    },
  );

  example(
    'The admin key',
    'npx kiln orgs create acme',
    'npx kiln orgs and keys: create, list, update, revoke, org limits, the webhook secret',
    async (ex) => {
      const [createOrg, createKey, createCi, list, update, revoke, orgLimits, secret] = commandsOf(ex, 8);
      expect(await ok(createOrg)).toMatch(/^org_\w+ +acme$/m);
      const acmeKey = (await ok(createKey)).trim();
      expect(acmeKey).toMatch(/^kiln_sk_\w{32}$/);
      expect((await ok(createCi)).trim()).toMatch(/^kiln_sk_\w{32}$/);

      const listed = await ok(list);
      expect(listed).not.toContain(acmeKey);
      const row = listed.split('\n').find((l) => l.includes(`${acmeKey.slice(0, 12)}…`));
      expect(row, listed).toMatch(/^key_\w+ +acme +kiln_sk_\w{4}… +standard +member/);
      expect(listed).toMatch(/ acme +kiln_sk_\w{4}… +free +member +ci /);
      const id = (row as string).split(' ')[0] as string;

      expect(await ok(fill(update, { 'key_0193…': id }))).toContain('rpm=60 tokens-per-day=2000000');
      expect((await api('/v1/models', { key: acmeKey })).status).toBe(200);
      await ok(fill(revoke, { 'key_0193…': id }));
      expect((await api('/v1/models', { key: acmeKey })).status).toBe(401);

      expect(await ok(orgLimits)).toMatch(/^acme +concurrent=32$/m);
      expect((await ok(secret)).trim()).toMatch(/^whsec_\w+$/);
    },
  );

  example(
    'The admin key',
    'curl -s http://127.0.0.1:8080/admin/v1/keys',
    'the same over HTTP: POST /admin/v1/keys answers the new key once',
    async (ex) => {
      const created = await curl(commandsOf(ex, 1)[0]);
      expect(created.status).toBe(201);
      const body = created.json();
      expect(body).toMatchObject({
        object: 'api_key',
        org: 'acme',
        name: 'ci',
        limits: { requests_per_minute: 60 },
      });
      expect((await api('/v1/models', { key: body.key })).status).toBe(200);
    },
  );
});

describe('Use it', () => {
  it('OpenAI clients use http://127.0.0.1:8080/v1 as their base URL: the openai client (chat and responses) and the AI SDK', async () => {
    const { default: OpenAI } = await import('openai');
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key, maxRetries: 0 });
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(['assistant', 'support', 'llama-3-8b']));
    const answer = await client.chat.completions.create({
      model: 'support',
      messages: [{ role: 'user', content: 'How does routing work?' }],
      max_tokens: 8,
    });
    expect(answer.usage?.completion_tokens).toBe(8);
    let streamed = '';
    for await (const chunk of await client.chat.completions.create({
      model: 'assistant',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 5,
      stream: true,
    })) {
      streamed += chunk.choices[0]?.delta.content ?? '';
    }
    expect(streamed.split(' ')).toHaveLength(5);

    // The Responses API on the same fleet: answered, continued, streamed, and through the AI SDK.
    const first = await client.responses.create({ model: 'assistant', input: 'Hello', max_output_tokens: 6 });
    expect(first.output_text.split(' ')).toHaveLength(6);
    const second = await client.responses.create({
      model: 'assistant',
      input: 'And then?',
      previous_response_id: first.id,
      max_output_tokens: 6,
    });
    expect(second.usage?.input_tokens).toBeGreaterThan(
      (first.usage?.input_tokens ?? 0) + (first.usage?.output_tokens ?? 0),
    );
    const types = new Set<string>();
    for await (const event of await client.responses.create({
      model: 'support',
      input: 'How does routing work?',
      max_output_tokens: 4,
      stream: true,
    })) {
      types.add(event.type);
    }
    expect([...types]).toEqual(
      expect.arrayContaining(['response.created', 'response.output_text.delta', 'response.incomplete']),
    );
    const { createOpenAI } = await import('@ai-sdk/openai');
    const { generateText } = await import('ai');
    const provider = createOpenAI({ baseURL: `${gateway.url}/v1`, apiKey: key });
    const { text } = await generateText({
      model: provider('assistant'),
      prompt: 'Hello',
      maxOutputTokens: 3,
      maxRetries: 0,
    });
    expect(text.split(' ')).toHaveLength(3);
  });

  example('Use it', 'Health:', 'Health: /healthz and /readyz', async (ex) => {
    const [health, ready] = commandsOf(ex, 2);
    expect((await curl(health)).json()).toEqual({ status: 'ok' });
    expect((await curl(ready)).json()).toMatchObject({ status: 'ready', store: 'sqlite' });
  });

  example('Use it', 'Personas and models', 'Personas and models: GET /v1/models', async (ex) => {
    const { data } = (await curl(commandsOf(ex, 1)[0])).json();
    expect(data).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: 'assistant', kind: 'persona', ready: true }),
        expect.objectContaining({ id: 'support', kind: 'persona', ready: true }),
        expect.objectContaining({ id: 'llama-3-8b', kind: 'chat', ready: true }),
        expect.objectContaining({ id: 'sdxl', kind: 'image', ready: true }),
        expect.objectContaining({ id: 'ltx-2.3', kind: 'video', ready: true }),
      ]),
    );
  });

  example(
    'Use it',
    'Chat, sync',
    'Chat, sync: the chat.completion and its x-kiln-route header',
    async (ex) => {
      const { status, body } = await curl(commandsOf(ex, 1)[0]);
      expect(status).toBe(200);
      const [head, json] = body.split('\r\n\r\n');
      expect(head).toMatch(/^x-kiln-route: class=[\w-]+; engine=[\w-]+; replica=\d+/im);
      expect(JSON.parse(json as string)).toMatchObject({ object: 'chat.completion', model: 'support' });
    },
  );

  example('Use it', 'Chat, stream', 'Chat, stream: chat.completion.chunk events, then [DONE]', async (ex) => {
    const { status, body } = await curl(commandsOf(ex, 1)[0]);
    expect(status).toBe(200);
    const events = body.split('\n\n').filter((e) => e.trim() !== '');
    expect(events.length).toBeGreaterThan(2);
    expect(events.pop()).toBe('data: [DONE]');
    for (const event of events) {
      expect(JSON.parse(event.replace(/^data: /, '')).object).toBe('chat.completion.chunk');
    }
  });

  example(
    'Use it',
    'Chat, async',
    'Chat, async: 202 with the polling_url, then the job by its uuid',
    async (ex) => {
      const [submit, poll] = commandsOf(ex, 2);
      const submitted = await curl(submit);
      expect(submitted.status).toBe(202);
      const { id, polling_url } = submitted.json();
      expect(polling_url).toMatch(/^\/api\/v1\/jobs\/[0-9a-f-]{36}$/);
      const uuid = polling_url.split('/').pop();
      const job = await pollUntilEnded(fill(poll, { '<uuid from polling_url>': uuid }));
      expect(job).toMatchObject({
        id,
        kind: 'chat',
        status: 'completed',
        result: { object: 'chat.completion' },
      });
    },
  );

  example('Use it', 'Responses API', 'Responses API: the response object with output_text', async (ex) => {
    const answer = await curl(commandsOf(ex, 1)[0]);
    expect(answer.status).toBe(200);
    const response = answer.json();
    expect(response).toMatchObject({ object: 'response', model: 'assistant' });
    expect(response.output_text.length).toBeGreaterThan(0);
  });

  let clip: { url: string; file_id: string };
  example(
    'Use it',
    'Video transition',
    'Video transition of the sample keyframes: the body file, 202 at 1280x704, then the completed job',
    async (ex) => {
      const [printf, submit, poll] = commandsOf(ex, 3);
      expect(statSync(path.join(REPO_ROOT, 'examples', 'start.png')).size).toBeGreaterThan(64 * 1024);
      await ok(printf);
      expect(statSync(path.join(clone.dir, 'transition.json')).size).toBeGreaterThan(128 * 1024);
      const submitted = await curl(submit);
      expect(submitted.status).toBe(202);
      const accepted = submitted.json();
      expect(accepted).toMatchObject({ object: 'video.transition', size: '1280x704', size_adjusted: true });
      const job = await pollUntilEnded(
        fill(poll, { '<uuid from polling_url>': accepted.polling_url.split('/').pop() }),
      );
      expect(job).toMatchObject({
        id: accepted.id,
        status: 'completed',
        result: { width: 1280, height: 704, content_type: 'video/webm' },
      });
      expect(Object.keys(job.result)).toEqual(
        expect.arrayContaining(['url', 'file_id', 'duration_ms', 'width', 'height', 'fps', 'content_type']),
      );
      clip = job.result;
    },
  );

  example(
    'Use it',
    'Download the file',
    'Download the file: by its signed URL, and by id with a key',
    async (ex) => {
      const [signed, byId] = commandsOf(ex, 2);
      const saved = path.join(clone.dir, 'clip.webm');
      expect((await curl(fill(signed, { '<result.url>': clip.url }))).status).toBe(200);
      const bySignature = readFileSync(saved);
      expect(bySignature.subarray(0, 4).toString('hex')).toBe('1a45dfa3'); // WebM (EBML)
      expect((await curl(fill(byId, { '<file_id>': clip.file_id }))).status).toBe(200);
      expect(readFileSync(saved).equals(bySignature)).toBe(true);
    },
  );

  example('Use it', 'Images:', 'Images: two 512x512 PNGs, sync, by URL', async (ex) => {
    const answer = await curl(commandsOf(ex, 1)[0]);
    expect(answer.status).toBe(200);
    const { data } = answer.json();
    expect(data).toHaveLength(2);
    // Read to the end: a body left unread keeps its connection busy, and the gateway's shutdown waits for it.
    const png = Buffer.from(await (await fetch(data[0].url)).arrayBuffer());
    expect(png.subarray(1, 4).toString()).toBe('PNG');
  });

  let runbookId = '';
  example(
    'Use it',
    'Save a context',
    'Save a context: 201, then 200 and version 2 saving it again',
    async (ex) => {
      const save = commandsOf(ex, 1)[0];
      const first = await curl(save);
      expect(first.status).toBe(201);
      expect(first.json()).toMatchObject({ name: 'runbook', description: 'on-call', version: 1 });
      const again = await curl(save);
      expect(again.status).toBe(200);
      expect(again.json()).toMatchObject({ id: first.json().id, version: 2 });
      runbookId = first.json().id;
    },
  );

  example('Use it', 'Fetch it by name or by id', 'Fetch it by name or by id', async (ex) => {
    const byName = commandsOf(ex, 1)[0];
    for (const command of [byName, byName.replace('/contexts/runbook', `/contexts/${runbookId}`)]) {
      expect((await curl(command)).json()).toMatchObject({
        id: runbookId,
        content: 'Restart the queue before the workers.',
      });
    }
  });

  example('Use it', 'List (no content)', 'List (no content), by prefix', async (ex) => {
    const { data, has_more } = (await curl(commandsOf(ex, 1)[0])).json();
    expect(has_more).toBe(false);
    expect(data.map((c: { name: string }) => c.name)).toEqual(['runbook']);
    expect(data[0]).not.toHaveProperty('content');
  });

  example('Use it', 'Delete', 'Delete: then it is gone', async (ex) => {
    const deleted = await curl(commandsOf(ex, 1)[0]);
    expect(deleted.json()).toMatchObject({ id: runbookId, deleted: true });
    expect((await api('/api/v1/contexts/runbook')).status).toBe(404);
  });

  example(
    'Use it',
    'Jobs of every kind',
    'Jobs of every kind: poll, list the running, cancel',
    async (ex) => {
      const id = await runningChatJob();
      const [poll, list, cancel] = commandsOf(ex, 3);
      expect((await curl(fill(poll, { '<job-id>': id }))).json()).toMatchObject({ id, status: 'running' });
      const running = (await curl(list)).json();
      expect(running.data.map((j: { id: string }) => j.id)).toContain(id);
      const cancelled = await curl(fill(cancel, { '<job-id>': id }));
      expect(cancelled.status).toBe(200);
      expect(cancelled.json()).toMatchObject({ id, status: 'cancelled' });
    },
  );

  example('Use it', 'Usage ledger', 'Usage ledger: summed per kind', async (ex) => {
    const usage = (await curl(commandsOf(ex, 1)[0])).json();
    expect(usage).toMatchObject({ object: 'usage', since: 1790000000 });
    expect(usage.data.map((k: { kind: string }) => k.kind)).toEqual(
      expect.arrayContaining(['chat', 'response', 'image.generation', 'video.transition']),
    );
  });

  example('Use it', 'MCP over Streamable HTTP', 'MCP over Streamable HTTP: tools/list', async (ex) => {
    const answer = await curl(commandsOf(ex, 1)[0]);
    expect(answer.status).toBe(200);
    const names = answer.json().result.tools.map((t: { name: string }) => t.name);
    expect(names.sort()).toEqual(['delete_context', 'get_context', 'list_contexts', 'save_context']);
  });

  it('the errors under the examples: another organisation gets 404, over 262144 bytes is 413 and not stored, an unknown model is 404', async () => {
    await api('/api/v1/contexts', {
      body: { name: 'runbook', content: 'Restart the queue before the workers.' },
    });
    const teammate = await ok('npx kiln keys create --org default');
    expect((await api('/api/v1/contexts/runbook', { key: teammate.trim() })).body.content).toBe(
      'Restart the queue before the workers.',
    );
    const stranger = await ok('npx kiln keys create --org acme');
    const hidden = await api('/api/v1/contexts/runbook', { key: stranger.trim() });
    expect(hidden).toMatchObject({ status: 404, body: { error: { code: 'not-found' } } });

    const big = await api('/api/v1/contexts', { body: { name: 'huge', content: 'x'.repeat(262_145) } });
    expect(big).toMatchObject({ status: 413, body: { error: { code: 'context-too-large' } } });
    expect((await api('/api/v1/contexts/huge')).status).toBe(404);

    const unknown = await api('/v1/chat/completions', {
      body: { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({
      type: expect.any(String),
      code: 'model-not-found',
      param: 'model',
    });
    expect(unknown.body.error.message).toContain('no-such-model');
    // As the reader left it: the walk-through deleted its runbook.
    expect((await api('/api/v1/contexts/runbook', { method: 'DELETE' })).status).toBe(200);
  });

  example(
    'Use it',
    'curl -s -X POST http://127.0.0.1:8080/admin/reload',
    'POST /admin/reload',
    async (ex) => {
      const reloaded = await curl(commandsOf(ex, 1)[0]);
      expect(reloaded.status).toBe(200);
      expect(reloaded.json()).toMatchObject({ reloaded: true });
      expect(reloaded.json().models).toEqual(expect.arrayContaining(['assistant', 'support', 'llama-3-8b']));
    },
  );
});

describe('The CLI', () => {
  let xvfb: Xvfb | undefined;
  beforeAll(async () => {
    if (clipboard.available) xvfb = await startXvfb();
  });
  afterAll(async () => {
    await xvfb?.stop();
  });

  example(
    'The CLI',
    'npx kiln ctx save -c',
    `kiln ctx: save (-c, clipboard, file, stdin), get, edit, list, rm${clipboard.available ? '' : ' (no clipboard here: its lines answer as the README says, no display)'}`,
    async (ex) => {
      const [saveC, saveClipboard, saveFile, saveNew, saveStdin, getClipboard, getStdout, edit, list, rm] =
        commandsOf(ex, 10);
      const display = xvfb ? `DISPLAY=${xvfb.display} ` : '';

      expect(await ok(saveC)).toMatch(
        /^saved ctx_\w+ 'house-style' \(21 bytes, version 1\), shared with your organisation$/m,
      );
      if (xvfb) {
        await writeClipboard(xvfb.display, 'id: uuid');
        expect(await ok(`${display}${saveClipboard}`)).toMatch(
          /^saved ctx_\w+ 'schema' \(8 bytes, version 1\)/m,
        );
      } else {
        const refused = await sh(saveClipboard);
        expect(refused.code).toBe(1);
        expect(refused.stderr).toMatch(
          /^kiln: no clipboard is available .*; pass the content with -c <content>/,
        );
      }
      const limitsBytes = statSync(path.join(REPO_ROOT, 'docs', 'limits.md')).size;
      expect(await ok(saveFile)).toMatch(
        new RegExp(`^saved ctx_\\w+ 'limits' \\(${limitsBytes} bytes, version 1\\)`, 'm'),
      );
      const refusedNew = await sh(saveNew);
      expect(refusedNew.code).toBe(1);
      expect(refusedNew.stderr).toMatch(
        /^kiln: context-exists \(HTTP 412\): a context named 'limits' exists/,
      );
      expect((await api('/api/v1/contexts/limits')).body.size_bytes).toBe(limitsBytes);
      expect(await ok(saveStdin)).toMatch(/^saved ctx_\w+ 'preamble' \(31 bytes, version 1\)/m);
      if (xvfb) {
        await ok(`${display}${getClipboard}`);
        expect((await readClipboardBytes(xvfb.display)).toString('utf8')).toBe('Use British spelling.');
      } else {
        const refused = await sh(getClipboard);
        expect(refused.code).toBe(1);
        expect(refused.stderr).toMatch(
          /^kiln: no clipboard is available .*; use --stdout to print the content instead/,
        );
      }
      expect(await ok(getStdout)).toBe('Use British spelling.');
      // The reader's editor, here one that makes its change without a terminal.
      expect(await ok(`EDITOR='sed -i s/short/brief/' ${edit}`)).toMatch(
        /^replaced ctx_\w+ 'preamble' \(31 bytes, version 2\)$/m,
      );
      expect((await api('/api/v1/contexts/preamble')).body.content).toBe('Answer in one brief paragraph.\n');
      const names = (await ok(list))
        .split('\n')
        .slice(1)
        .map((row) => row.split(/ +/)[1])
        .filter(Boolean);
      expect(names).toEqual(['house-style', 'limits', 'preamble', ...(xvfb ? ['schema'] : [])].sort());
      expect(await ok(rm)).toMatch(/^deleted ctx_\w+$/m);
      expect((await api('/api/v1/contexts/preamble')).status).toBe(404);
    },
  );

  example(
    'The CLI',
    'npx kiln chat --list',
    'kiln chat and jobs: list, a persona, a model with a context, async, wait, list, cancel',
    async (ex) => {
      const [list, persona, model, submit, submitAndWait, jobsList, wait, cancel] = commandsOf(ex, 8);
      expect(await ok(list)).toMatch(/^assistant +persona +yes/m);
      expect((await ok(persona)).trim().length).toBeGreaterThan(0);
      // The simulator writes one word a token: the answer is all 200 tokens.
      expect((await ok(model)).trim().split(' ')).toHaveLength(200);
      const essay = /chatcmpl-[0-9a-f-]{36}/.exec(await ok(submit))?.[0] as string;
      expect(essay).toBeDefined();
      expect((await ok(submitAndWait)).trim().length).toBeGreaterThan(0);
      expect(await ok(jobsList)).toContain(essay);
      expect(JSON.parse(await ok(fill(wait, { 'chatcmpl-01a2…': essay })))).toMatchObject({
        id: essay,
        status: 'completed',
      });
      const running = await runningChatJob();
      expect(JSON.parse(await ok(fill(cancel, { 'chatcmpl-01a2…': running })))).toMatchObject({
        id: running,
        status: 'cancelled',
      });
    },
  );

  example(
    'The CLI',
    'npx kiln video transition',
    'kiln video and images: a transition into clips/, a generation, two PNGs, jobs wait',
    async (ex) => {
      const [transition, generate, images, wait] = commandsOf(ex, 4);
      expect(await ok(transition)).toMatch(/^completed vidgen-\S+: 1280x704/m);
      const clips = readdirSync(path.join(clone.dir, 'clips'));
      expect(clips).toHaveLength(1);
      expect(statSync(path.join(clone.dir, 'clips', clips[0] as string)).size).toBeGreaterThan(1000);

      const generated = await ok(generate);
      expect(generated).toMatch(/^url http:\/\/\S+$/m);
      const video = /^completed (vidgen-[0-9a-f-]{36}): 832x480, 6\.0 s/m.exec(generated)?.[1] as string;
      expect(video, generated).toBeDefined();

      await ok(images);
      for (const file of ['lighthouse.png', 'lighthouse-2.png']) {
        expect(readFileSync(path.join(clone.dir, file)).subarray(1, 4).toString()).toBe('PNG');
      }
      expect(JSON.parse(await ok(fill(wait, { 'vidgen-01a2…': video })))).toMatchObject({
        id: video,
        kind: 'video.generation',
        status: 'completed',
      });
    },
  );
});

describe('MCP', () => {
  example(
    'MCP',
    '{ "command": "npx"',
    'an MCP client runs npx kiln mcp with the server list entry',
    async (ex) => {
      const entry = JSON.parse(fill(ex.text, { 'http://127.0.0.1:8080': gateway.url, 'kiln_sk_…': key })) as {
        command: string;
        args: string[];
        env: Record<string, string>;
      };
      expect(entry.command).toBe('npx');
      const transport = new StdioClientTransport({
        // The entry's command, through NPX_KILN: bash -c 'npx "$@"' bash kiln mcp.
        command: 'bash',
        args: ['--norc', '-c', `${NPX_KILN}${entry.command} "$@"`, 'bash', ...entry.args],
        cwd: clone.dir,
        env: { PATH: process.env.PATH ?? '', ...entry.env },
      });
      const client = new Client({ name: 'readme-test', version: '0.0.0' });
      await client.connect(transport);
      try {
        const { tools } = await client.listTools();
        expect(tools.map((t) => t.name).sort()).toEqual([
          'delete_context',
          'get_context',
          'list_contexts',
          'save_context',
        ]);
        const got = (await client.callTool({
          name: 'get_context',
          arguments: { id_or_name: 'house-style' },
        })) as CallToolResult;
        const context = got.structuredContent as { id: string; content: string };
        expect(context.content).toBe('Use British spelling.');
        const { resources } = await client.listResources();
        expect(resources.map((r) => r.uri)).toContain(`kiln-context://${context.id}`);
      } finally {
        await client.close();
      }
    },
  );
});
