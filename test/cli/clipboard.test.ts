import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { skipReason } from '../helpers/skip-reporter.js';
import { storeCases } from '../helpers/stores.js';

/**
 * Why there is no clipboard, as `kiln` says it when one is needed: the real CLI in child processes,
 * in environments built to lack one thing each (a display, the X server a DISPLAY names, a program).
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];
const COPY_INSTEAD = 'use --stdout to print the content instead';
const PASTE_INSTEAD = 'pass the content with -c <content>, --file <path> or on stdin';
const notLinux =
  process.platform === 'linux'
    ? undefined
    : skipReason(`these are Linux's display checks, and this is ${process.platform}`);

/** A local X display number nothing listens on: :87 unless some server holds that one. */
function deadDisplay(): string {
  let number = 87;
  while (existsSync(`/tmp/.X11-unix/X${number}`)) number += 1;
  return `:${number}`;
}

let workDir: string;
let server: TestServer;
/** `kiln` against the gateway, with DISPLAY, WAYLAND_DISPLAY and XDG_RUNTIME_DIR left out unless given. */
let kiln: Kiln;

beforeAll(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'kiln-clipboard-test-'));
  server = await startTestServer(sqlite);
  kiln = kilnWith({ cwd: workDir, env: { KILN_BASE_URL: server.url, KILN_API_KEY: server.adminKey } });
  const { status } = await server.call('POST', '/api/v1/contexts', {
    body: { name: 'notes', content: 'glaze at cone 6\n' },
  });
  expect(status).toBe(201);
});
afterAll(async () => {
  await server?.close();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

/** `ctx get` (copies) and `ctx save --from-clipboard` (pastes) in the same environment. */
async function copyAndPaste(env: Record<string, string | undefined>) {
  const [copy, paste] = await Promise.all([
    kiln(['ctx', 'get', '-c', 'notes'], { env }),
    kiln(['ctx', 'save', '--from-clipboard', '--name', 'pasted'], { env }),
  ]);
  for (const result of [copy, paste]) {
    expect(result.code, result.stderr).toBe(1);
    expect(result.stdout).toBe('');
  }
  expect((await server.call('GET', '/api/v1/contexts/pasted')).status).toBe(404);
  return { copy: copy.stderr, paste: paste.stderr };
}

describe.skipIf(notLinux)('kiln says why there is no clipboard', () => {
  it('with DISPLAY and WAYLAND_DISPLAY unset: no desktop session', async () => {
    const { copy, paste } = await copyAndPaste({});
    const reason = 'DISPLAY and WAYLAND_DISPLAY are unset: there is no desktop session to hold a clipboard';
    expect(copy).toBe(`kiln: no clipboard is available (${reason}); ${COPY_INSTEAD}\n`);
    expect(paste).toBe(`kiln: no clipboard is available (${reason}); ${PASTE_INSTEAD}\n`);
  });

  it('with DISPLAY naming a display no X server answers on: that, and how to start one, not "install xsel"', async () => {
    const display = deadDisplay();
    // The test's own PATH: xclip, and xsel if installed, are there; the programs are not what is missing.
    const { copy, paste } = await copyAndPaste({ DISPLAY: display });
    const reason = `DISPLAY=${display} is set but no X server answers there: start one with \`Xvfb ${display} &\`, or unset DISPLAY`;
    expect(copy).toBe(`kiln: no clipboard is available (${reason}); ${COPY_INSTEAD}\n`);
    expect(paste).toBe(`kiln: no clipboard is available (${reason}); ${PASTE_INSTEAD}\n`);
    expect(copy + paste).not.toMatch(/xsel/);
  });

  it('with a DISPLAY value that names no display: that it is malformed', async () => {
    const { copy } = await copyAndPaste({ DISPLAY: 'workstation' });
    expect(copy).toBe(
      `kiln: no clipboard is available (DISPLAY=workstation is not an X display name like :0 or localhost:10.0: correct or unset it); ${COPY_INSTEAD}\n`,
    );
  });

  /*
   * Under X, a PATH without xsel or xclip is no failure: clipboardy ships its own xsel and uses it
   * (ctx.test.ts copies through it on Xvfb). Under Wayland the program must be installed.
   */
  it('on Wayland with no wl-clipboard on PATH: install it', async () => {
    const emptyPath = path.join(workDir, 'empty-bin');
    mkdirSync(emptyPath, { recursive: true });
    const { copy, paste } = await copyAndPaste({
      WAYLAND_DISPLAY: 'wayland-87',
      XDG_RUNTIME_DIR: workDir,
      PATH: emptyPath,
    });
    const reason =
      'WAYLAND_DISPLAY=wayland-87 is set but wl-clipboard is not installed: install it, e.g. `sudo apt-get install wl-clipboard`';
    expect(copy).toBe(`kiln: no clipboard is available (${reason}); ${COPY_INSTEAD}\n`);
    expect(paste).toBe(`kiln: no clipboard is available (${reason}); ${PASTE_INSTEAD}\n`);
  });

  it('on Wayland with wl-clipboard but no compositor at WAYLAND_DISPLAY: that, not "install xsel"', async () => {
    // Stand-ins that fail as wl-copy and wl-paste do when no compositor listens.
    const bin = path.join(workDir, 'wl-bin');
    mkdirSync(bin, { recursive: true });
    for (const program of ['wl-copy', 'wl-paste']) {
      const file = path.join(bin, program);
      writeFileSync(file, '#!/bin/sh\necho "Failed to connect to a Wayland server" >&2\nexit 1\n');
      chmodSync(file, 0o755);
    }
    const { copy, paste } = await copyAndPaste({
      WAYLAND_DISPLAY: 'wayland-87',
      XDG_RUNTIME_DIR: workDir,
      PATH: bin,
    });
    const reason = `WAYLAND_DISPLAY=wayland-87 is set but no Wayland compositor answers at ${path.join(workDir, 'wayland-87')}: run kiln inside the desktop session, or unset WAYLAND_DISPLAY`;
    expect(copy).toBe(`kiln: no clipboard is available (${reason}); ${COPY_INSTEAD}\n`);
    expect(paste).toBe(`kiln: no clipboard is available (${reason}); ${PASTE_INSTEAD}\n`);
  });
});
