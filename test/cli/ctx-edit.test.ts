import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
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
import { copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
if (env.EDIT_DELETE) {
  const [url, key, name] = JSON.parse(env.EDIT_DELETE);
  const answer = await fetch(url + '/api/v1/contexts/' + name, {
    method: 'DELETE',
    headers: { authorization: 'Bearer ' + key },
  });
  if (answer.status >= 300) throw new Error('the teammate could not delete: ' + answer.status);
}
if (env.EDIT_WRITE !== undefined) writeFileSync(file, env.EDIT_WRITE);
if (env.EDIT_WRITE_HEX !== undefined) writeFileSync(file, Buffer.from(env.EDIT_WRITE_HEX, 'hex'));
if (env.EDIT_APPEND) writeFileSync(file, readFileSync(file, 'utf8') + env.EDIT_APPEND);
if (env.EDIT_REMOVE) rmSync(file);
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
    expect(result.stderr).toContain(
      `  compare it with version 2: kiln ctx get 'shared/spec' --stdout | diff - '${kept}'\n` +
        "  to edit version 2 instead, run kiln ctx edit 'shared/spec' again and bring your change over,\n" +
        `  or replace version 2 with yours: kiln ctx save --name 'shared/spec' --file '${kept}' --if-version 2\n`,
    );
    // The teammate's version stands.
    const after = await stored('shared/spec');
    expect(after.content).toBe('the teammate\u2019s v2\n');
    expect(after.version).toBe(2);
    // The second piece of advice, followed: the edit replaces the version the user has now seen.
    const over = await ctx(['ctx', 'save', '--name', 'shared/spec', '--file', kept, '--if-version', '2']);
    expect([over.code, over.stderr]).toEqual([0, '']);
    expect(over.stdout).toMatch(/^replaced ctx_\w+ 'shared\/spec' \(6 bytes, version 3\)/);
    expect(await stored('shared/spec')).toMatchObject({ content: 'my v2\n', version: 3 });
    rmSync(path.dirname(kept), { recursive: true });

    // Deleted while the editor was open: the edit is kept, and the way to create it again is given.
    const gone = await ctx(['ctx', 'edit', 'shared/spec'], {
      env: {
        EDIT_DELETE: JSON.stringify([server.url, server.adminKey, 'shared/spec']),
        EDIT_WRITE: 'my v3\n',
      },
    });
    expect(gone.code).toBe(1);
    const keptAgain = /your edit is kept in (\S+)\n/.exec(gone.stderr)?.[1] as string;
    expect(gone.stderr).toContain(
      `'shared/spec' no longer exists: kiln ctx save --new --name 'shared/spec' --file '${keptAgain}' creates it again`,
    );
    const recreated = await ctx(['ctx', 'save', '--new', '--name', 'shared/spec', '--file', keptAgain]);
    expect(recreated.code).toBe(0);
    expect((await stored('shared/spec')).content).toBe('my v3\n');
    rmSync(path.dirname(keptAgain), { recursive: true });
  });

  it('saves nothing when the editor fails, keeping what it had written; nor when it leaves the file empty or gone', async () => {
    await seed('keep-me', 'precious\n');
    const failedUntouched = await ctx(['ctx', 'edit', 'keep-me'], { env: { EDIT_EXIT: '3' } });
    expect(failedUntouched.code).toBe(1);
    expect(failedUntouched.stderr).toMatch(
      /^kiln: the editor failed \('.+' exited with 3\): nothing was saved\n$/,
    );
    expect(readdirSync(editTmp)).toEqual([]);

    // An editor can exit non-zero after writing (vim after an error during the session): not lost.
    const failed = await ctx(['ctx', 'edit', 'keep-me'], {
      env: { EDIT_WRITE: 'half-done', EDIT_EXIT: '3' },
    });
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(
      /^kiln: the editor failed \('.+' exited with 3\): nothing was saved\n {2}your edit is kept in \S+\n$/,
    );
    const kept = /your edit is kept in (\S+)\n/.exec(failed.stderr)?.[1] as string;
    expect(readFileSync(kept, 'utf8')).toBe('half-done');
    rmSync(path.dirname(kept), { recursive: true });

    const emptied = await ctx(['ctx', 'edit', 'keep-me'], { env: { EDIT_WRITE: '' } });
    expect(emptied.code).toBe(1);
    expect(emptied.stderr).toBe(
      "kiln: the file is empty: nothing was saved (kiln ctx rm 'keep-me' deletes a context)\n",
    );

    // Not UTF-8 ("café" in Latin-1): refused rather than saved altered, and kept.
    const latin1 = await ctx(['ctx', 'edit', 'keep-me'], { env: { EDIT_WRITE_HEX: '636166e90a' } });
    expect(latin1.code).toBe(1);
    expect(latin1.stderr).toMatch(
      /^kiln: the edited file is not UTF-8 text; .*\n {2}your edit is kept in \S+\n$/,
    );
    const keptLatin1 = /your edit is kept in (\S+)\n/.exec(latin1.stderr)?.[1] as string;
    rmSync(path.dirname(keptLatin1), { recursive: true });

    // An editor that deletes its file leaves nothing to save, and is told so in words.
    const removed = await ctx(['ctx', 'edit', 'keep-me'], { env: { EDIT_REMOVE: '1' } });
    expect(removed.code).toBe(1);
    expect(removed.stderr).toMatch(/^kiln: \S+keep-me is gone after the editor: nothing was saved\n$/);

    const after = await stored('keep-me');
    expect(after.content).toBe('precious\n');
    expect(after.version).toBe(1);
    expect(readdirSync(editTmp)).toEqual([]);
  });

  it('opens no editor for what it cannot edit: an unknown id, a bad name, a wrong gateway address, no editor at all', async () => {
    const seen = path.join(workDir, 'seen-never');
    const cases: Array<{ args: string[]; env?: Record<string, string | undefined>; stderr: RegExp }> = [
      { args: [`ctx_${'0'.repeat(32)}`], stderr: /^kiln: not-found \(HTTP 404\)/ },
      // What starts with ctx_ is an id to the gateway, never a new name.
      { args: ['ctx_notes'], stderr: /^kiln: not-found \(HTTP 404\)/ },
      { args: ['bad name!'], stderr: /^kiln: validation-failed/ },
      // A reference the gateway finds nothing for, but no name a save would take.
      { args: ['team/../prod'], stderr: /^kiln: validation-failed: .*\n {2}- name: /s },
      // KILN_BASE_URL with /v1 on it: a 404 that is no answer about the context.
      {
        args: ['team/runbook.md'],
        env: { KILN_BASE_URL: `${server.url}/v1` },
        stderr: /^kiln: route-not-found \(HTTP 404\)/,
      },
      // Without VISUAL or EDITOR, vi needs a terminal, which a test's child has not.
      {
        args: ['team/runbook.md'],
        env: { EDITOR: undefined },
        stderr: /^kiln: no terminal to run vi in: set VISUAL or EDITOR/,
      },
    ];
    for (const c of cases) {
      const result = await ctx(['ctx', 'edit', ...c.args], { env: { EDIT_SEEN: seen, ...c.env } });
      expect(result.code, c.args[0]).toBe(1);
      expect(result.stderr, c.args[0]).toMatch(c.stderr);
      expect(existsSync(seen), c.args[0]).toBe(false);
    }
    expect(readdirSync(editTmp)).toEqual([]);
    expect((await server.call('GET', '/api/v1/contexts/ctx_notes')).status).toBe(404);
  });
});
