import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';
import { probeClipboard, readClipboardBytes, startXvfb, writeClipboard, type Xvfb } from '../helpers/xvfb.js';

/**
 * The `kiln` CLI as a user runs it: `node bin/kiln.js …` in child processes, against a real
 * gateway (sqlite store) listening on loopback, with a real X clipboard (Xvfb) where one is needed.
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];
const clipboard = probeClipboard();

/** Multi-line, multi-byte, with tabs, quotes, backslashes and a trailing newline: any mangling shows. */
const RUNBOOK = [
  'Deploy runbook — prod',
  '',
  '1. Drain «web-1»: kubectl drain web-1 --ignore-daemonsets',
  '2. Ship it 🚀  (naïve café, 日本語, ümlaut)',
  '\tindented with a tab, "double" and \'single\' quotes, a \\ backslash',
  '',
].join('\n');

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/** A scratch directory, removed in afterAll; also the children's cwd (no kiln.yaml, no ./data). */
let workDir: string;
beforeAll(() => {
  workDir = mkdtempSync(path.join(tmpdir(), 'kiln-cli-test-'));
});
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

describe('kiln ctx against a running gateway', () => {
  let server: TestServer;
  /** `kiln` as a member of the `default` organisation: KILN_BASE_URL and KILN_API_KEY, no display. */
  let ctx: Kiln;

  beforeAll(async () => {
    server = await startTestServer(sqlite);
    ctx = kilnWith({ cwd: workDir, env: { KILN_BASE_URL: server.url, KILN_API_KEY: server.adminKey } });
  });
  afterAll(async () => server?.close());

  /** Saves through the HTTP API, for tests whose subject is not saving. */
  async function seed(name: string, content: string): Promise<string> {
    const { status, body } = await server.call('POST', '/api/v1/contexts', { body: { name, content } });
    expect(status).toBe(201);
    return body.id as string;
  }

  /** Runs `kiln` against a stand-in gateway on loopback that answers with `handler`. */
  async function againstStandIn(
    handler: Parameters<typeof createServer>[1],
    args: string[],
  ): Promise<Awaited<ReturnType<Kiln>>> {
    const standIn = createServer(handler);
    await new Promise<void>((resolve) => standIn.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(standIn.address() as AddressInfo).port}`;
      return await ctx(args, { env: { KILN_BASE_URL: url } });
    } finally {
      await new Promise((resolve) => standIn.close(resolve));
    }
  }

  async function contentOnServer(name: string): Promise<string> {
    const { status, body } = await server.call('GET', `/api/v1/contexts/${name}`);
    expect(status).toBe(200);
    return body.content as string;
  }

  describe(`with a real clipboard (Xvfb)${clipboard.available ? '' : ` (skipped: ${clipboard.reason})`}`, {
    skip: !clipboard.available,
  }, () => {
    let xvfb: Xvfb;
    /** `kiln` with DISPLAY set to the test's own X server. */
    let ctxOnDisplay: Kiln;

    beforeAll(async () => {
      xvfb = await startXvfb();
      ctxOnDisplay = (args, options = {}) =>
        ctx(args, { ...options, env: { ...options.env, DISPLAY: xvfb.display } });
    });
    afterAll(async () => xvfb?.stop());

    it('save -c reports id, size and sharing; get -c puts the exact bytes on the clipboard', async () => {
      const saved = await ctxOnDisplay(['ctx', 'save', '-c', RUNBOOK, '--name', 'runbook']);
      expect(saved.stderr).toBe('');
      expect(saved.code).toBe(0);
      const match =
        /^saved (ctx_[0-9a-f]{32}) 'runbook' \((\d+) bytes, version 1\), shared with your organisation\n$/.exec(
          saved.stdout,
        );
      expect(match, saved.stdout).not.toBeNull();
      const [, id, size] = match as RegExpExecArray;
      expect(Number(size)).toBe(bytes(RUNBOOK));

      const copied = await ctxOnDisplay(['ctx', 'get', '-c', 'runbook']);
      expect(copied.stderr).toBe('');
      expect(copied.code).toBe(0);
      expect(copied.stdout).toBe(
        `copied ${id} 'runbook' (${bytes(RUNBOOK)} bytes, version 1) to the clipboard\n`,
      );
      // Read back by another program, after kiln has exited: the content stays on the clipboard.
      const onClipboard = await readClipboardBytes(xvfb.display);
      expect(onClipboard.toString('utf8')).toBe(RUNBOOK);
      expect(onClipboard.equals(Buffer.from(RUNBOOK, 'utf8'))).toBe(true);
    });

    it('save --from-clipboard saves what another program put on the clipboard', async () => {
      const text = `copied from the browser: ✓ ünïcödé 🚀\nsecond line\n\n`;
      await writeClipboard(xvfb.display, text);
      const saved = await ctxOnDisplay(['ctx', 'save', '--from-clipboard', '--name', 'from-clipboard']);
      expect(saved.stderr).toBe('');
      expect(saved.code).toBe(0);
      expect(saved.stdout).toMatch(
        new RegExp(`^saved ctx_\\w+ 'from-clipboard' \\(${bytes(text)} bytes, version 1\\)`),
      );
      expect(await contentOnServer('from-clipboard')).toBe(text);
    });
  });

  it('save --file and piped stdin save the exact content; the same name again replaces it as version 2', async () => {
    const file = path.join(workDir, 'notes.md');
    writeFileSync(file, RUNBOOK);
    const [fromFile, fromStdin] = await Promise.all([
      ctx(['ctx', 'save', '--file', file, '--name', 'notes']),
      ctx(['ctx', 'save', '--name', 'piped'], { input: RUNBOOK }),
    ]);
    for (const [result, name] of [
      [fromFile, 'notes'],
      [fromStdin, 'piped'],
    ] as const) {
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      expect(result.stdout).toMatch(
        new RegExp(
          `^saved ctx_\\w+ '${name}' \\(${bytes(RUNBOOK)} bytes, version 1\\), shared with your organisation\\n$`,
        ),
      );
    }
    expect(await contentOnServer('notes')).toBe(RUNBOOK);
    expect(await contentOnServer('piped')).toBe(RUNBOOK);

    const firstId = /ctx_\w+/.exec(fromStdin.stdout)?.[0];
    const second = 'version two — ✓\n';
    const replaced = await ctx(['ctx', 'save', '--name', 'piped'], { input: second });
    expect(replaced.code).toBe(0);
    expect(replaced.stdout).toBe(
      `replaced ${firstId} 'piped' (${bytes(second)} bytes, version 2), shared with your organisation\n`,
    );
    expect(await contentOnServer('piped')).toBe(second);

    // Empty stdin (cron, CI) is refused rather than saved over the context as a new, empty version.
    const empty = await ctx(['ctx', 'save', '--name', 'piped'], { input: '' });
    expect(empty.code).not.toBe(0);
    expect(empty.stderr).toMatch(/no content on stdin/);
    expect(await contentOnServer('piped')).toBe(second);
  });

  it('save --new creates, and refuses to replace an existing context, keeping it and saying why', async () => {
    const created = await ctx(['ctx', 'save', '--new', '--name', 'fresh'], { input: 'first\n' });
    expect([created.code, created.stderr]).toEqual([0, '']);
    expect(created.stdout).toMatch(/^saved ctx_\w+ 'fresh' \(6 bytes, version 1\)/);

    const again = await ctx(['ctx', 'save', '--new', '--name', 'fresh'], { input: 'second\n' });
    expect(again.code).toBe(1);
    expect(again.stdout).toBe('');
    expect(again.stderr).toMatch(
      /^kiln: context-exists \(HTTP 412\): a context named 'fresh' exists already \(version 1, ETag "ctx_\w+\.1", saved [^)]+\)\. Nothing was saved\.\n {2}leave out --new to replace it, or save it under another name\n$/,
    );
    expect(await contentOnServer('fresh')).toBe('first\n');
  });

  it('save --new refused for a name deleted since: no advice to replace what is gone', async () => {
    // The gateway's answer when the name was deleted between the refused insert and reading it back
    // (a race no test can time): 412 without the context beside the error.
    const refused = await againstStandIn(
      (_request, response) => {
        const message =
          "a context named 'fresh' existed when this save ran and has been deleted since. Nothing was saved.";
        response.writeHead(412, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify({
            error: { type: 'conflict_error', code: 'context-exists', message, param: 'If-None-Match' },
          }),
        );
      },
      ['ctx', 'save', '--new', '--name', 'fresh', '-c', 'x'],
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      "kiln: context-exists (HTTP 412): a context named 'fresh' existed when this save ran and has been deleted since. Nothing was saved.\n" +
        '  the name is free again: run the same command to create it\n',
    );
  });

  it('save --if-version refused for a context deleted after it was looked up: the way to create it again', async () => {
    // The gateway's answers when the context was deleted between the CLI's lookup of its id and the
    // save (a race no test can time): the context, then 412 without it beside the error.
    const refused = await againstStandIn(
      (request, response) => {
        response.writeHead(request.method === 'GET' ? 200 : 412, { 'content-type': 'application/json' });
        if (request.method === 'GET') {
          response.end(
            JSON.stringify({
              object: 'context',
              id: `ctx_${'a'.repeat(32)}`,
              name: 'gone',
              version: 4,
              content: 'x',
            }),
          );
          return;
        }
        const message =
          "no context named 'gone' exists now: it was deleted, or never saved. Nothing was saved.";
        response.end(
          JSON.stringify({
            error: { type: 'conflict_error', code: 'context-changed', message, param: 'If-Match' },
          }),
        );
      },
      ['ctx', 'save', '--if-version', '4', '--name', 'gone', '-c', 'x'],
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      "kiln: context-changed (HTTP 412): no context named 'gone' exists now: it was deleted, or never saved. Nothing was saved.\n" +
        '  it is gone: save with --new instead to create it again\n',
    );
  });

  it('save refuses empty content from -c or a file, keeping the stored context', async () => {
    await seed('kept', 'still here\n');
    const empty = path.join(workDir, 'empty.txt');
    writeFileSync(empty, '');
    for (const args of [
      ['-c', ''],
      ['--file', empty],
    ]) {
      const refused = await ctx(['ctx', 'save', '--name', 'kept', ...args]);
      expect([refused.code, refused.stdout, refused.stderr], args[0]).toEqual([
        1,
        '',
        "kiln: the content is empty: nothing was saved (kiln ctx rm 'kept' deletes a context)\n",
      ]);
    }
    expect(await contentOnServer('kept')).toBe('still here\n');
  });

  it('save with -c or --file leaves piped stdin unread: a loop reading its input saves each line', async () => {
    const file = path.join(workDir, 'given.txt');
    writeFileSync(file, 'from the file\n');
    for (const [flag, value, stored] of [
      ['-c', 'from -c', 'from -c'],
      ['--file', file, 'from the file\n'],
    ] as const) {
      const saved = await ctx(['ctx', 'save', '--name', 'given', flag, value], { input: 'piped\n' });
      expect(saved.code, saved.stderr).toBe(0);
      expect(await contentOnServer('given')).toBe(stored);
    }
  });

  it('save refuses a file or piped input that is not UTF-8, saying so, and stores nothing', async () => {
    // "café" in Latin-1: its é is no UTF-8. Decoded leniently it would be stored as "caf\uFFFD".
    const latin1 = Buffer.from('café\n', 'latin1');
    const file = path.join(workDir, 'latin1.txt');
    writeFileSync(file, latin1);
    const [fromFile, fromStdin] = await Promise.all([
      ctx(['ctx', 'save', '--file', file, '--name', 'latin1-file']),
      ctx(['ctx', 'save', '--name', 'latin1-piped'], { input: latin1 }),
    ]);
    expect([fromFile.code, fromFile.stdout]).toEqual([1, '']);
    expect(fromFile.stderr).toBe(`kiln: ${file} is not UTF-8 text; convert it first (iconv -t UTF-8)\n`);
    expect([fromStdin.code, fromStdin.stdout]).toEqual([1, '']);
    expect(fromStdin.stderr).toMatch(/the piped input is not UTF-8 text/);
    for (const name of ['latin1-file', 'latin1-piped'])
      expect((await server.call('GET', `/api/v1/contexts/${name}`)).status).toBe(404);
    // A byte order mark is UTF-8, and kept as it was sent.
    const withBom = `\ufeff${RUNBOOK}`;
    expect((await ctx(['ctx', 'save', '--name', 'bom'], { input: Buffer.from(withBom) })).code).toBe(0);
    expect(await contentOnServer('bom')).toBe(withBom);
  });

  it('list pages with a hint that keeps the prefix and the page size', async () => {
    for (const name of ['team/a', 'team/b', 'zz-other']) await seed(name, name);
    const first = await ctx(['ctx', 'list', '--prefix', 'team/', '--limit', '1']);
    expect(first.code).toBe(0);
    expect(first.stderr).toBe("more: kiln ctx list --prefix 'team/' --limit 1 --after 'team/a'\n");
    const next = await ctx(['ctx', 'list', '--prefix', 'team/', '--limit', '1', '--after', 'team/a']);
    expect(next.stdout).toContain('team/b');
    expect(next.stdout).not.toContain('zz-other');
  });

  it('get --stdout prints exactly the content, by name or by id', async () => {
    const id = await seed('handbook', RUNBOOK);
    const [byName, byId] = await Promise.all([
      ctx(['ctx', 'get', '-c', 'handbook', '--stdout']),
      ctx(['ctx', 'get', id, '--stdout']),
    ]);
    for (const result of [byName, byId]) {
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      expect(result.stdout).toBe(RUNBOOK);
    }
  });

  it('without a display, get and save --from-clipboard say there is no clipboard and what to do instead', async () => {
    await seed('headless', RUNBOOK);
    const noDisplay = { DISPLAY: undefined, WAYLAND_DISPLAY: undefined };
    const [get, save] = await Promise.all([
      ctx(['ctx', 'get', '-c', 'headless'], { env: noDisplay }),
      ctx(['ctx', 'save', '--from-clipboard', '--name', 'z'], { env: noDisplay }),
    ]);

    expect(get.code).not.toBe(0);
    expect(get.stdout).toBe('');
    expect(get.stderr).toMatch(
      /^kiln: no clipboard is available .*; use --stdout to print the content instead\n$/,
    );

    expect(save.code).not.toBe(0);
    expect(save.stdout).toBe('');
    expect(save.stderr).toMatch(/^kiln: no clipboard is available .*; pass the content with -c <content>/);
    expect((await server.call('GET', '/api/v1/contexts/z')).status).toBe(404);
  });

  it('list shows the names; rm deletes, after which get is not-found', async () => {
    const id = await seed('to-delete', 'short-lived');
    await seed('to-keep', 'stays');

    const listed = await ctx(['ctx', 'list']);
    expect(listed.code).toBe(0);
    const names = listed.stdout
      .trimEnd()
      .split('\n')
      .map((line) => line.split(/\s+/)[1]);
    expect(names[0]).toBe('NAME');
    expect(names).toEqual(expect.arrayContaining(['to-delete', 'to-keep']));

    const removed = await ctx(['ctx', 'rm', 'to-delete']);
    expect(removed.code).toBe(0);
    expect(removed.stdout).toBe(`deleted ${id}\n`);

    const gone = await ctx(['ctx', 'get', '-c', 'to-delete', '--stdout']);
    expect(gone.code).not.toBe(0);
    expect(gone.stdout).toBe('');
    expect(gone.stderr).toBe("kiln: not-found (HTTP 404): no context 'to-delete' in this organisation\n");
  });

  it("another organisation's key cannot read the context, by name or by id", async () => {
    const id = await seed('secret-plan', 'the default org only');
    const otherKey = await server.key('other-org');
    const asOther = { env: { KILN_API_KEY: otherKey } };
    const [byName, byId] = await Promise.all([
      ctx(['ctx', 'get', '-c', 'secret-plan', '--stdout'], asOther),
      ctx(['ctx', 'get', '-c', id, '--stdout'], asOther),
    ]);
    for (const result of [byName, byId]) {
      expect(result.code).not.toBe(0);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain('not-found');
      expect(result.stderr).not.toContain('the default org only');
    }
  });
});

describe('kiln orgs / keys on the store, with a gateway on the same store', () => {
  let gateway: TestServer;
  /** `kiln` with KILN_DATA_DIR only: the store is <dir>/kiln.db, the file the gateway uses. */
  let admin: Kiln;

  beforeAll(async () => {
    const dataDir = mkdtempSync(path.join(workDir, 'admin-'));
    // The gateway starts first, on the empty file, and bootstraps it (org `default`, admin key).
    gateway = await startTestServer(sqlite, { 'store.url': `sqlite:${path.join(dataDir, 'kiln.db')}` });
    admin = kilnWith({ cwd: workDir, env: { KILN_DATA_DIR: dataDir } });
  });
  afterAll(async () => gateway?.close());

  it('creates an organisation and a key; the key works until `keys revoke`, then gets 401', async () => {
    const org = await admin(['orgs', 'create', 'acme']);
    expect(org.stderr).toBe('');
    expect(org.code).toBe(0);
    expect(org.stdout).toMatch(/^org_[0-9a-f]{32} {2}acme\n$/);

    const created = await admin(['keys', 'create', '--org', 'acme', '--tier', 'free']);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^kiln_sk_[0-9A-Za-z]{32}\n$/);
    const key = created.stdout.trim();
    const keyId = /created (key_[0-9a-f]{32}) for organisation acme \(tier free, role member\)/.exec(
      created.stderr,
    )?.[1];
    expect(keyId, created.stderr).toBeDefined();
    expect(created.stderr).not.toContain(key);
    expect((await gateway.call('GET', '/api/v1/contexts', { key })).status).toBe(200);

    const listed = await admin(['keys', 'list']);
    expect(listed.code).toBe(0);
    const row = listed.stdout.split('\n').find((line) => line.startsWith(`${keyId} `));
    expect(row, listed.stdout).toBeDefined();
    expect(row).toMatch(new RegExp(`acme\\s+${key.slice(0, 12)}…\\s+free\\s+member\\s.*active$`));
    expect(listed.stdout).not.toContain(key);
    expect(listed.stdout).not.toContain(key.slice(12));

    const revoked = await admin(['keys', 'revoke', keyId as string]);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toBe(`revoked ${keyId}\n`);

    const afterRevoke = await gateway.call('GET', '/api/v1/contexts', { key });
    expect(afterRevoke.status).toBe(401);
    expect(afterRevoke.body.error.code).toBe('unauthorized');
  });

  it('refuses an invalid organisation name, an invalid key name and a key for an unknown organisation, saying why', async () => {
    const [badName, noOrg, ...badKeyNames] = await Promise.all([
      admin(['orgs', 'create', 'no spaces!']),
      admin(['keys', 'create', '--org', 'missing']),
      ...['', 'x'.repeat(201), 'a\tb\nc'].map((name) =>
        admin(['keys', 'create', '--org', 'acme', '--name', name]),
      ),
    ]);
    for (const refused of badKeyNames) {
      expect([refused.code, refused.stdout]).toEqual([1, '']);
      expect(refused.stderr).toBe(
        'kiln: key names are 1–200 characters, none of them a control character (tab, newline)\n',
      );
    }
    expect(badName.code).toBe(1);
    expect(badName.stdout).toBe('');
    expect(badName.stderr).toBe(
      'kiln: organisation names are 1–64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit\n',
    );
    expect(noOrg.code).toBe(1);
    expect(noOrg.stdout).toBe('');
    expect(noOrg.stderr).toBe("kiln: no organisation 'missing' (create it with: kiln orgs create missing)\n");
  });
});

describe('kiln serve', () => {
  it('does not start on a bad configuration value, and names the key and the variable', async () => {
    const dataDir = mkdtempSync(path.join(workDir, 'serve-'));
    const kiln = kilnWith({ cwd: workDir, env: { KILN_DATA_DIR: dataDir } });
    // Were it to start, it would listen until the runner's timeout, which fails the test.
    const result = await kiln(['serve'], { env: { KILN_PORT: 'abc' } });
    expect(result.code).not.toBe(0);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^kiln: invalid configuration:\n {2}- port: .*"abc" \(from KILN_PORT\)\n$/);
  });

  it('exits on a bad security.dns_servers or allow_hosts too, before it opens anything', async () => {
    const dataDir = mkdtempSync(path.join(workDir, 'serve-'));
    const kiln = kilnWith({ cwd: workDir, env: { KILN_DATA_DIR: dataDir, KILN_PORT: '0' } });
    const result = await kiln(['serve'], {
      env: { KILN_SECURITY_DNS_SERVERS: 'abc', KILN_SECURITY_ALLOW_HOSTS: '10.0.0.0/99' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^kiln: invalid configuration:\n {2}- security\.allow_hosts\[0\]: '10\.0\.0\.0\/99' is neither .*\n {2}- security\.dns_servers: .*abc.*\n$/,
    );
    // Nothing was opened: no store in the data dir.
    expect(existsSync(path.join(dataDir, 'kiln.db'))).toBe(false);
  });
});
