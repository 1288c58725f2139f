import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KILN_BIN } from '../helpers/cli.js';

const run = promisify(execFile);

/**
 * The README's walk-through, as a newcomer would do it: `kiln serve` (what `npm start` runs) in an
 * empty directory with no configuration, the admin key from ./data/admin.key, curl for the API and
 * the `kiln` admin commands for more keys.
 */
describe('the README walk-through', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kiln-readme-'));
  let server: ChildProcess;
  let base: string;
  let admin: string;

  const kiln = async (...args: string[]) =>
    (
      await run(process.execPath, [KILN_BIN, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? '' } })
    ).stdout.trim();
  const curl = async (key: string, ...args: string[]) => {
    const { stdout } = await run(
      'curl',
      ['-s', '-w', '\n%{http_code}', '-H', `Authorization: Bearer ${key}`, ...args],
      {
        maxBuffer: 4 * 1024 * 1024,
      },
    );
    const lines = stdout.split('\n');
    return { status: Number(lines.pop()), body: JSON.parse(lines.join('\n')) };
  };

  beforeAll(async () => {
    server = spawn(process.execPath, [KILN_BIN, 'serve'], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', KILN_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    base = await new Promise<string>((resolve, reject) => {
      let seen = '';
      server.once('exit', (code) => reject(new Error(`kiln serve exited with ${code}: ${seen}`)));
      server.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
        seen += chunk;
        const line = seen.split('\n').find((l) => l.includes('kiln is listening'));
        if (line) resolve((JSON.parse(line) as { url: string }).url);
      });
    });
    admin = readFileSync(path.join(dir, 'data', 'admin.key'), 'utf8').trim();
  });
  afterAll(async () => {
    server?.kill('SIGTERM');
    await new Promise((r) => server?.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts on SQLite under ./data and writes the admin key with mode 0600', () => {
    expect(statSync(path.join(dir, 'data', 'kiln.db')).isFile()).toBe(true);
    expect(statSync(path.join(dir, 'data', 'admin.key')).mode & 0o777).toBe(0o600);
    expect(admin).toMatch(/^kiln_sk_[0-9A-Za-z]{32}$/);
  });

  it('shares a context by name within the organisation, hides it from another, refuses 300 KiB', async () => {
    const saved = await curl(
      admin,
      `${base}/api/v1/contexts`,
      '-H',
      'Content-Type: application/json',
      '-d',
      '{"name":"runbook","content":"Restart the queue before the workers."}',
    );
    expect(saved.status).toBe(201);

    const teammate = await kiln('keys', 'create', '--org', 'default');
    const fetched = await curl(teammate, `${base}/api/v1/contexts/runbook`);
    expect(fetched.status).toBe(200);
    expect(fetched.body.content).toBe('Restart the queue before the workers.');

    await kiln('orgs', 'create', 'globex');
    const stranger = await kiln('keys', 'create', '--org', 'globex');
    const hidden = await curl(stranger, `${base}/api/v1/contexts/runbook`);
    expect(hidden.status).toBe(404);
    expect(hidden.body.error.code).toBe('not-found');

    const big = path.join(dir, 'big.json');
    writeFileSync(big, JSON.stringify({ name: 'huge', content: 'x'.repeat(300 * 1024) }));
    const refused = await curl(
      admin,
      `${base}/api/v1/contexts`,
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      `@${big}`,
    );
    expect(refused.status).toBe(413);
    expect(refused.body.error.code).toBe('context-too-large');
    expect((await curl(admin, `${base}/api/v1/contexts/huge`)).status).toBe(404);
  });
});

describe('kiln dev', () => {
  it('starts the gateway with a simulated fleet that the openai client (chat and responses) and the AI SDK can use', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kiln-dev-'));
    const dev = spawn(process.execPath, [KILN_BIN, 'dev'], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', KILN_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const base = await new Promise<string>((resolve, reject) => {
        let seen = '';
        dev.once('exit', (code) => reject(new Error(`kiln dev exited with ${code}: ${seen}`)));
        dev.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
          seen += chunk;
          const match = /Kiln dev is running at (\S+)\/v1/.exec(seen);
          if (match) resolve(match[1] as string);
        });
      });
      const { default: OpenAI } = await import('openai');
      const client = new OpenAI({
        baseURL: `${base}/v1`,
        apiKey: readFileSync(path.join(dir, 'data', 'admin.key'), 'utf8').trim(),
        maxRetries: 0,
      });
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
      const first = await client.responses.create({
        model: 'assistant',
        input: 'Hello',
        max_output_tokens: 6,
      });
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
      const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: client.apiKey ?? '' });
      const { text } = await generateText({
        model: provider('assistant'),
        prompt: 'Hello',
        maxOutputTokens: 3,
        maxRetries: 0,
      });
      expect(text.split(' ')).toHaveLength(3);
    } finally {
      dev.kill('SIGTERM');
      await new Promise((r) => dev.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
