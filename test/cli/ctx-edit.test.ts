import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * `kiln ctx edit` as a user runs it: the real CLI in a child process against a real gateway, with
 * an "editor" that is a small node script doing what the test asks to the file it is given (and, to
 * play a teammate, saving a version of its own through the HTTP API first).
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];

const EDITOR_SCRIPT = `
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
const file = process.argv[2];
const env = process.env;
if (env.EDIT_SEEN) copyFileSync(file, env.EDIT_SEEN);
if (env.EDIT_RACE) {
  const [url, key, name, content] = JSON.parse(env.EDIT_RACE);
  const answer = await fetch(url + '/api/v1/contexts', {
    method: 'POST',
    headers: { authorization: 'Bearer ' + key, 'content-type': 'application/json' },
    body: JSON.stringify({ name, content }),
  });
  if (answer.status >= 300) throw new Error('the teammate could not save: ' + answer.status);
}
if (env.EDIT_WRITE !== undefined) writeFileSync(file, env.EDIT_WRITE);
if (env.EDIT_APPEND) writeFileSync(file, readFileSync(file, 'utf8') + env.EDIT_APPEND);
process.exit(Number(env.EDIT_EXIT ?? 0));
`;

let workDir: string;
/** Where the CLI makes its edit files: the test's own TMPDIR, so that what it leaves behind shows. */
let editTmp: string;
let server: TestServer;
let ctx: Kiln;

beforeAll(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'kiln-edit-test-'));
  editTmp = path.join(workDir, 'tmp');
  const script = path.join(workDir, 'editor.mjs');
  writeFileSync(script, EDITOR_SCRIPT);
  mkdirSync(editTmp);
  server = await startTestServer(sqlite);
  ctx = kilnWith({
    cwd: workDir,
    env: {
      KILN_BASE_URL: server.url,
      KILN_API_KEY: server.adminKey,
      TMPDIR: editTmp,
      EDITOR: `'${process.execPath}' '${script}'`,
      VISUAL: undefined,
    },
  });
});

afterAll(async () => {
  await server?.close();
  rmSync(workDir, { recursive: true, force: true });
});

async function stored(name: string): Promise<{ content: string; version: number; description: string }> {
  const { status, body } = await server.call('GET', `/api/v1/contexts/${name}`);
  expect(status).toBe(200);
  return body;
}

async function seed(name: string, content: string, description?: string): Promise<void> {
  const { status } = await server.call('POST', '/api/v1/contexts', {
    body: { name, content, ...(description ? { description } : {}) },
  });
  expect(status).toBe(201);
}

describe('kiln ctx edit', () => {
  it('opens the stored content in the editor and saves the edit as the next version, description kept', async () => {
    await seed('team/runbook.md', '# Runbook\n\n1. Drain «web-1»\n', 'on-call steps');
    const seen = path.join(workDir, 'seen-1');
    const result = await ctx(['ctx', 'edit', 'team/runbook.md'], {
      env: { EDIT_SEEN: seen, EDIT_APPEND: '2. Ship it 🚀\n' },
    });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^replaced ctx_\w+ 'team\/runbook\.md' \(\d+ bytes, version 2\)\n$/);
    // The editor was given the stored content, in a file named after the context.
    expect(readFileSync(seen, 'utf8')).toBe('# Runbook\n\n1. Drain «web-1»\n');
    const after = await stored('team/runbook.md');
    expect(after.content).toBe('# Runbook\n\n1. Drain «web-1»\n2. Ship it 🚀\n');
    expect(after.version).toBe(2);
    expect(after.description).toBe('on-call steps');
    expect(readdirSync(editTmp)).toEqual([]);
  });

  it('saves nothing when the file comes back unchanged', async () => {
    await seed('unchanged', 'as it was\n');
    const result = await ctx(['ctx', 'edit', 'unchanged']);
    expect(result.code).toBe(0);
    expect(result.stdout).toBe("no change: 'unchanged' stays at version 1\n");
    expect((await stored('unchanged')).version).toBe(1);
  });

  it('creates a context that does not exist yet, and never over one created meanwhile', async () => {
    const created = await ctx(['ctx', 'edit', 'brand-new'], { env: { EDIT_WRITE: 'first words\n' } });
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^saved ctx_\w+ 'brand-new' \(12 bytes, version 1\)\n$/);
    expect((await stored('brand-new')).content).toBe('first words\n');

    const race = JSON.stringify([server.url, server.adminKey, 'contested', 'the teammate was first\n']);
    const lost = await ctx(['ctx', 'edit', 'contested'], {
      env: { EDIT_RACE: race, EDIT_WRITE: 'mine\n' },
    });
    expect(lost.code).toBe(1);
    expect(lost.stderr).toMatch(
      /^kiln: context-exists \(HTTP 412\): a context named 'contested' exists already/,
    );
    expect((await stored('contested')).content).toBe('the teammate was first\n');
    const kept = /your edit is kept in (\S+)\n/.exec(lost.stderr)?.[1] as string;
    expect(readFileSync(kept, 'utf8')).toBe('mine\n');
    rmSync(path.dirname(kept), { recursive: true });
  });

  it("refuses to overwrite a teammate's save made while the editor was open, and keeps the edit in its file", async () => {
    await seed('shared/spec', 'v1 of the spec\n');
    const race = JSON.stringify([server.url, server.adminKey, 'shared/spec', 'the teammate\u2019s v2\n']);
    const result = await ctx(['ctx', 'edit', 'shared/spec'], {
      env: { EDIT_RACE: race, EDIT_WRITE: 'my v2\n' },
    });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(
      /^kiln: context-changed \(HTTP 412\): context 'shared\/spec' is not the version this save was based on: it is at version 2, /,
    );
    const kept = /your edit is kept in (\S+)\n/.exec(result.stderr)?.[1] as string;
    expect(kept.startsWith(editTmp)).toBe(true);
    expect(readFileSync(kept, 'utf8')).toBe('my v2\n');
    expect(result.stderr).toContain(`kiln ctx save --name 'shared/spec' --file '${kept}'`);
    // The teammate's version stands.
    const after = await stored('shared/spec');
    expect(after.content).toBe('the teammate\u2019s v2\n');
    expect(after.version).toBe(2);

    // Saving the kept file, as the hint says, is the deliberate overwrite.
    const saved = await ctx(['ctx', 'save', '--name', 'shared/spec', '--file', kept]);
    expect(saved.code).toBe(0);
    expect((await stored('shared/spec')).content).toBe('my v2\n');
    rmSync(path.dirname(kept), { recursive: true });
  });

  it('saves nothing when the editor fails or leaves the file empty', async () => {
    await seed('keep-me', 'precious\n');
    const failed = await ctx(['ctx', 'edit', 'keep-me'], {
      env: { EDIT_WRITE: 'half-done', EDIT_EXIT: '3' },
    });
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(
      /^kiln: the editor failed \('.+' exited with status 3\): nothing was saved\n$/,
    );

    const emptied = await ctx(['ctx', 'edit', 'keep-me'], { env: { EDIT_WRITE: '' } });
    expect(emptied.code).toBe(1);
    expect(emptied.stderr).toBe(
      "kiln: the file is empty: nothing was saved (kiln ctx rm 'keep-me' deletes a context)\n",
    );
    const after = await stored('keep-me');
    expect(after.content).toBe('precious\n');
    expect(after.version).toBe(1);
    expect(readdirSync(editTmp)).toEqual([]);
  });

  it('answers 404 for an id that names no context, creating nothing', async () => {
    const result = await ctx(['ctx', 'edit', `ctx_${'0'.repeat(32)}`], { env: { EDIT_WRITE: 'x' } });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^kiln: not-found \(HTTP 404\)/);
    expect(readdirSync(editTmp)).toEqual([]);
  });
});
