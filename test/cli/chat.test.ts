import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobWaitTimeoutError, KilnClient } from '../../src/client/index.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { KILN_BIN, type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * `kiln chat` and `kiln jobs` as a user runs them (`node bin/kiln.js …`, stdout a pipe), against a
 * real gateway in front of simulated engines: `m` (healthy), `broken` (every call answers 500) and
 * `dropper` (streams break off after a few events).
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

describe('kiln chat and kiln jobs against a simulated fleet', () => {
  let workDir: string;
  let sims: LlmSim[] = [];
  let server: TestServer;
  let kiln: Kiln;

  beforeAll(async () => {
    workDir = mkdtempSync(path.join(tmpdir(), 'kiln-chat-cli-'));
    const healthy = await simPool(1);
    const broken = await simPool(1);
    const dropping = await simPool(1, { decodeMsPerToken: 2 });
    sims = [...healthy, ...broken, ...dropping];
    await broken[0]?.setFault({ kind: 'error', status: 500, message: 'the GPU is on fire' });
    await dropping[0]?.setFault({ kind: 'drop-mid-stream', afterChunks: 4 });
    server = await startTestServer(sqlite, {
      engines: {
        local: engine('unique', healthy),
        flaky: engine('unique', broken, { models: { broken: 'sim-model' } }),
        dropping: engine('unique', dropping, { models: { dropper: 'sim-model' } }),
      },
      personas: { helper: { model: 'm', system: 'Be brief.' } },
      'jobs.poll_interval_ms': 100,
    });
    kiln = kilnWith({ cwd: workDir, env: { KILN_BASE_URL: server.url, KILN_API_KEY: server.adminKey } });
  });
  afterAll(async () => {
    await server?.close();
    await closeAll(sims);
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  /** What the API itself answers for this request, the reference the CLI's output is held to. */
  async function apiContent(body: Record<string, unknown>): Promise<string> {
    const answer = await server.call('POST', '/v1/chat/completions', { body });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer.body.choices[0].message.content as string;
  }

  it('--list shows the personas and the served models, with kind and readiness', async () => {
    const listed = await kiln(['chat', '--list']);
    expect(listed.stderr).toBe('');
    expect(listed.code).toBe(0);
    const rows = listed.stdout
      .trimEnd()
      .split('\n')
      .map((line) => line.split(/\s+/));
    expect(rows[0]).toEqual(['ID', 'KIND', 'READY', 'OWNED_BY']);
    expect(rows).toContainEqual(['helper', 'persona', 'yes', 'kiln']);
    expect(rows.find((r) => r[0] === 'm')?.slice(0, 3)).toEqual(['m', 'chat', 'yes']);

    const json = await kiln(['chat', '--list', '--json']);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout).data.map((m: { id: string }) => m.id)).toEqual(
      expect.arrayContaining(['helper', 'm', 'broken']),
    );
  });

  it('sync, --stream, piped stdin and --async --wait all print the answer the API gives', async () => {
    const request = {
      model: 'helper',
      messages: [{ role: 'user', content: 'Tell me about glazes.' }],
      max_tokens: 7,
      seed: 11,
    };
    const expected = await apiContent(request);
    expect(expected.split(' ')).toHaveLength(7);

    const args = ['chat', '--persona', 'helper', '--max-tokens', '7', '--seed', '11'];
    const [sync, streamed, piped, waited, json] = await Promise.all([
      kiln([...args, 'Tell', 'me', 'about', 'glazes.']),
      kiln([...args, '--stream', 'Tell me about glazes.']),
      kiln([...args, '--stream'], { input: 'Tell me about glazes.\n' }),
      kiln([...args, '--async', '--wait', 'Tell me about glazes.']),
      kiln([...args, '--json', 'Tell me about glazes.']),
    ]);
    for (const result of [sync, streamed, piped, waited]) {
      expect(result.code).toBe(0);
      expect(result.stdout).toBe(`${expected}\n`);
    }
    for (const result of [sync, streamed, piped]) expect(result.stderr).toBe('');
    // Waiting, it names the job first: an interrupted wait leaves a job that can be found again.
    expect(waited.stderr).toMatch(new RegExp(`^submitted chatcmpl-${UUID}; waiting for it\n$`));
    expect(json.code).toBe(0);
    const completion = JSON.parse(json.stdout);
    expect(completion).toMatchObject({ object: 'chat.completion', model: 'helper' });
    expect(completion.id).toMatch(new RegExp(`^chatcmpl-${UUID}$`));
    expect(completion.choices[0].message.content).toBe(expected);
    expect(completion.usage.completion_tokens).toBe(7);

    // --system adds a message, so the prompt and the answer change.
    const withSystem = await kiln([...args, '--system', 'Answer in French.', 'Tell me about glazes.']);
    expect(withSystem.code).toBe(0);
    expect(withSystem.stdout).toBe(
      `${await apiContent({ ...request, messages: [{ role: 'system', content: 'Answer in French.' }, ...request.messages] })}\n`,
    );
  });

  it('piped text and arguments make one message, the piped text first; --context goes before both', async () => {
    await server.call('POST', '/api/v1/contexts', {
      body: { name: 'glaze-notes', content: 'Celadon is a grey-green glaze.\n' },
    });
    const piped = 'Tenmoku is a dark iron glaze.\nShino is white.\n';
    const words = 'Compare the two glazes.';
    const request = (content: string, contexts?: string[]) => ({
      model: 'helper',
      messages: [{ role: 'user', content }],
      max_tokens: 9,
      seed: 5,
      ...(contexts ? { contexts } : {}),
    });
    const both = `${piped.replace(/\n$/, '')}\n\n${words}`;
    const [wordsOnly, joined, joinedWithContext, pipedWithContext] = await Promise.all([
      apiContent(request(words)),
      apiContent(request(both)),
      apiContent(request(both, ['glaze-notes'])),
      apiContent(request(piped.replace(/\n$/, ''), ['glaze-notes'])),
    ]);
    // The answers differ, so each run below shows which message (and context) it sent.
    expect(new Set([wordsOnly, joined, joinedWithContext, pipedWithContext]).size).toBe(4);

    const args = ['chat', '--persona', 'helper', '--max-tokens', '9', '--seed', '5'];
    const runs = await Promise.all([
      kiln([...args, words], { input: piped }),
      kiln([...args, '--context', 'glaze-notes', words], { input: piped }),
      kiln([...args, '--context', 'glaze-notes', '--async', '--wait', words], { input: piped }),
      kiln([...args, '--context', 'glaze-notes'], { input: piped }),
      // A pipe that closes empty adds nothing.
      kiln([...args, words], { input: '' }),
    ]);
    const expected = [joined, joinedWithContext, joinedWithContext, pipedWithContext, wordsOnly];
    for (const [index, run] of runs.entries()) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout, `run ${index}`).toBe(`${expected[index]}\n`);
    }
  });

  it('arguments with a pipe on stdin left open and silent: answers them after a second, saying so', async () => {
    const expected = await apiContent({
      model: 'helper',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
    });
    // A parent that spawns kiln with a stdin pipe it never writes to nor closes.
    const child = spawn(
      process.execPath,
      [KILN_BIN, 'chat', '--persona', 'helper', '--max-tokens', '4', 'hello'],
      {
        cwd: workDir,
        env: { PATH: process.env.PATH ?? '', KILN_BASE_URL: server.url, KILN_API_KEY: server.adminKey },
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    const code = await new Promise((resolve) => child.on('close', resolve));
    clearTimeout(timer);
    child.stdin.destroy();
    expect(code, stderr).toBe(0);
    expect(stdout).toBe(`${expected}\n`);
    expect(stderr).toBe('kiln: stdin is a pipe that sent nothing within 1 s; going on without it\n');
  });

  it('--async prints the job id alone on stdout, its polling url on stderr; kiln jobs get / wait / list / cancel follow the job', async () => {
    const submitted = await kiln(['chat', '--model', 'm', '--max-tokens', '3', '--async', 'hello']);
    expect(submitted.code).toBe(0);
    const id = new RegExp(`^(chatcmpl-(${UUID}))\\n$`).exec(submitted.stdout)?.[1];
    expect(id, submitted.stdout).toBeDefined();
    const match = new RegExp(
      `^submitted ${id} \\(queued\\); poll (/api/v1/jobs/(${UUID}))\\nwait for it: kiln jobs wait ${id}\\n$`,
    ).exec(submitted.stderr);
    expect(match, submitted.stderr).not.toBeNull();
    const [, pollingUrl, pollingUuid] = match as RegExpExecArray;
    expect(id).toBe(`chatcmpl-${pollingUuid}`);

    const waited = await kiln(['jobs', 'wait', id as string, '--interval', '50']);
    expect(waited.stderr).toBe('');
    expect(waited.code).toBe(0);
    const done = JSON.parse(waited.stdout);
    expect(done).toMatchObject({ id, object: 'job', kind: 'chat', status: 'completed' });
    expect(done.result.choices[0].message.content.split(' ')).toHaveLength(3);

    const [byId, byUrl, listed, listedJson, cancel] = await Promise.all([
      kiln(['jobs', 'get', id as string]),
      kiln(['jobs', 'get', pollingUrl as string]),
      kiln(['jobs', 'list', '--kind', 'chat', '--status', 'completed']),
      kiln(['jobs', 'list', '--json', '--limit', '100']),
      kiln(['jobs', 'cancel', id as string]),
    ]);
    for (const got of [byId, byUrl]) {
      expect(got.code).toBe(0);
      expect(JSON.parse(got.stdout)).toEqual(done);
    }
    expect(listed.code).toBe(0);
    const rows = listed.stdout.trimEnd().split('\n');
    expect(rows[0]?.split(/\s+/)).toEqual(['ID', 'KIND', 'STATUS', 'CREATED', 'FINISHED', 'CODE']);
    expect(rows.find((row) => row.startsWith(`${id} `))).toMatch(
      /^\S+\s+chat\s+completed\s+\d{4}-\d\d-\d\d /,
    );
    expect(JSON.parse(listedJson.stdout).data.map((job: { id: string }) => job.id)).toContain(id);
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toMatch(/^kiln: job-already-terminal \(HTTP 409\): /);

    // A page's hint keeps its filters and size; following it gives the next page of the same list.
    await kiln(['chat', '--model', 'm', '--max-tokens', '3', 'again']);
    const page = await kiln(['jobs', 'list', '--kind', 'chat', '--status', 'completed', '--limit', '1']);
    const hint = /^more: kiln jobs list --status completed --kind 'chat' --limit 1 --after (\S+)\n$/.exec(
      page.stderr,
    );
    expect(hint, page.stderr).not.toBeNull();
    const next = await kiln([
      'jobs',
      'list',
      '--status',
      'completed',
      '--kind',
      'chat',
      '--limit',
      '1',
      '--after',
      hint?.[1] as string,
    ]);
    expect(next.stdout.trimEnd().split('\n')[1]).toMatch(/^chatcmpl-\S+\s+chat\s+completed /);

    // A poll interval a timer cannot hold, or a busy one, is refused before any poll.
    for (const interval of ['3000000000', '0.5', '5']) {
      const refused = await kiln(['jobs', 'wait', id as string, '--interval', interval]);
      expect([refused.code, refused.stdout], interval).toEqual([1, '']);
      expect(refused.stderr, interval).toMatch(/^kiln: --interval must be /);
    }
  });

  it('an unknown model and a failing engine print the error code and exit 1', async () => {
    const [unknown, unknownStream, broken, brokenWait, dropped] = await Promise.all([
      kiln(['chat', '--model', 'gpt-17', 'hi']),
      kiln(['chat', '--model', 'gpt-17', '--stream', 'hi']),
      kiln(['chat', '--model', 'broken', 'hi']),
      kiln(['chat', '--model', 'broken', '--async', '--wait', 'hi']),
      kiln(['chat', '--model', 'dropper', '--stream', '--max-tokens', '40', 'tell me a story']),
    ]);
    for (const result of [unknown, unknownStream]) {
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        "kiln: model-not-found (HTTP 404): no persona or served model named 'gpt-17'; GET /v1/models lists them\n",
      );
    }
    expect(broken.code).toBe(1);
    expect(broken.stdout).toBe('');
    expect(broken.stderr).toMatch(/^kiln: inference-failed \(HTTP 502\): .+\n$/);

    expect(brokenWait.code).toBe(1);
    expect(brokenWait.stdout).toBe('');
    expect(brokenWait.stderr).toMatch(
      new RegExp(
        `^submitted (chatcmpl-${UUID}); waiting for it\\nkiln: job \\1 failed: inference-failed: .+\\n$`,
      ),
    );

    // Some text arrived before the engine broke off: it stays printed, on a line of its own, then the error.
    expect(dropped.code).toBe(1);
    expect(dropped.stdout).toMatch(/^\S.*\n$/);
    expect(dropped.stdout.split(' ').length).toBeLessThan(40);
    expect(dropped.stderr).toMatch(/^kiln: inference-failed \(HTTP 502\): .+\n$/);
  });

  it('refuses a missing message, a missing model and conflicting flags, without calling the gateway', async () => {
    const results = await Promise.all([
      kiln(['chat', '--persona', 'helper'], { input: '' }),
      kiln(['chat', '--persona', 'helper'], { input: '\n  \n' }),
      kiln(['chat', '--persona', 'helper']),
      kiln(['chat', 'hello']),
      kiln(['chat', '--persona', 'helper', '--model', 'm', 'hello']),
      kiln(['chat', '--persona', 'helper', '--wait', 'hello']),
      kiln(['chat', '--persona', 'helper', '--max-tokens', 'many', 'hello']),
    ]);
    const stderr = results.map((r) => r.stderr);
    expect(stderr).toEqual([
      'kiln: no message on stdin: pass it as arguments, or pipe in some text\n',
      'kiln: no message on stdin: pass it as arguments, or pipe in some text\n',
      'kiln: no message on stdin: pass it as arguments, or pipe in some text\n',
      'kiln: say who to talk to: --persona <name> or --model <name> (kiln chat --list shows them)\n',
      'kiln: pass --persona or --model, not both\n',
      'kiln: --wait goes with --async (without --async, kiln chat waits for the answer anyway)\n',
      "kiln: --max-tokens must be a whole number of 1 or more, not 'many'\n",
    ]);
    for (const result of results) {
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
    }
    const jobs = await server.call('GET', '/v1/jobs?limit=100');
    expect(jobs.body.data.map((j: { status: string }) => j.status)).not.toContain('queued');
  });

  it('the client: create, stream, submit and wait; a stream left early and a job cancelled stop their work', async () => {
    const client = new KilnClient({ baseUrl: server.url, apiKey: server.adminKey });
    const request = {
      model: 'm',
      messages: [{ role: 'user' as const, content: 'hi' }],
      max_tokens: 5,
      seed: 1,
    };
    const completion = await client.chat.create(request);
    let streamedText = '';
    for await (const chunk of client.chat.stream(request)) {
      expect(chunk.object).toBe('chat.completion.chunk');
      streamedText += chunk.choices[0]?.delta.content ?? '';
    }
    expect(streamedText).toBe(completion.choices[0]?.message.content);
    const submitted = await client.chat.submit(request);
    const done = await client.jobs.wait(submitted.polling_url, { intervalMs: 20 });
    expect(done).toMatchObject({ id: submitted.id, status: 'completed' });
    expect((done.result as typeof completion).choices[0]?.message.content).toBe(streamedText);

    // About 3 s of decoding each: both are stopped long before.
    const long = { ...request, max_tokens: 3000 };
    let streamId = '';
    for await (const chunk of client.chat.stream(long)) {
      streamId = chunk.id;
      if (chunk.choices[0]?.delta.content) break;
    }
    const running = await client.chat.submit(long);
    const error = await client.jobs.wait(running.id, { intervalMs: 20, timeoutMs: 100 }).catch((e) => e);
    expect(error).toBeInstanceOf(JobWaitTimeoutError);
    expect(error.job).toMatchObject({ id: running.id, status: 'running' });
    expect(await client.jobs.cancel(running.id)).toMatchObject({ status: 'cancelled', code: 'cancelled' });
    expect(await client.jobs.wait(streamId, { intervalMs: 20, timeoutMs: 2000 })).toMatchObject({
      status: 'cancelled',
    });
  });
});
