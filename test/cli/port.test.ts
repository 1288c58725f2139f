import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KILN_BIN, kiln } from '../helpers/cli.js';
import { closedPort } from '../helpers/ports.js';

/**
 * The gateway's port as a newcomer meets it: `npm start` (`node … bin/kiln.js start`) on a port that
 * is taken must stop at once, say which port and how to pick another, and leave nothing running;
 * `--port` picks the port on the command line, over KILN_PORT.
 */

const HOST = '127.0.0.1';

interface Started {
  child: ChildProcess;
  pid: number;
  output: () => string;
  exited: Promise<{ code: number | null }>;
}

/** Every child's process group, so that a failing test cannot leave one running. */
const groups = new Set<number>();

/** `node bin/kiln.js …args` in `cwd`, as the leader of a process group of its own. */
function startKiln(args: string[], cwd: string, env: Record<string, string> = {}): Started {
  const child = spawn(process.execPath, [KILN_BIN, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? cwd, ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.pid === undefined) throw new Error(`could not spawn kiln ${args.join(' ')}`);
  groups.add(child.pid);
  let seen = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    seen += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    seen += chunk;
  });
  const exited = new Promise<{ code: number | null }>((resolve) => {
    child.once('exit', (code) => resolve({ code }));
  });
  return { child, pid: child.pid, output: () => seen, exited };
}

/** True once no process of the group led by `pid` is left (the leader and anything it spawned). */
function groupGone(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Resolves with the base URL once `kiln dev` says it is running; rejects if it exits first. */
function devUrl(started: Started): Promise<string> {
  return new Promise((resolve, reject) => {
    const look = () => {
      const match = /Kiln dev is running at (\S+)\/v1/.exec(started.output());
      if (match) resolve(match[1] as string);
    };
    started.child.stdout?.on('data', look);
    void started.exited.then(({ code }) =>
      reject(new Error(`kiln exited with ${code} first: ${started.output()}`)),
    );
  });
}

describe('the gateway port', () => {
  let busy: Server;
  let busyPort: number;
  let dir: string;

  beforeAll(async () => {
    busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, HOST, resolve));
    busyPort = (busy.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => busy.close(resolve));
  });
  afterEach(() => {
    for (const pid of groups) {
      if (!groupGone(pid)) process.kill(-pid, 'SIGKILL');
      groups.delete(pid);
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    { what: 'KILN_PORT=<busy> npm start (no kiln.yaml: kiln dev)', args: ['start'], viaEnv: true },
    { what: 'KILN_PORT=<busy> kiln serve', args: ['serve'], viaEnv: true },
    { what: 'kiln dev --port <busy>, over KILN_PORT=0', args: ['dev'], viaEnv: false },
    { what: 'kiln serve --port <busy>, over KILN_PORT=0', args: ['serve'], viaEnv: false },
  ])(
    '$what exits non-zero within 5 s, names the port, and leaves nothing running',
    async ({ args, viaEnv }) => {
      dir = mkdtempSync(path.join(tmpdir(), 'kiln-port-'));
      const started = viaEnv
        ? startKiln(args, dir, { KILN_PORT: String(busyPort) })
        : startKiln([...args, '--port', String(busyPort)], dir, { KILN_PORT: '0' });
      const ended = await Promise.race([started.exited, sleep(5000).then(() => undefined)]);
      const output = started.output();
      expect(ended, `still running after 5 s; output:\n${output}`).toBeDefined();
      expect(ended?.code, output).not.toBe(0);
      expect(ended?.code, output).not.toBeNull();
      expect(output).toContain(`kiln: cannot listen on ${HOST}:${busyPort}: the port is already in use`);
      for (const how of ['--port', 'KILN_PORT', 'port:']) expect(output).toContain(how);
      expect(output).not.toContain('kiln is listening');
      expect(output).not.toContain('Kiln dev is running');
      // Nothing of the start outlives it: no process in its group, and the port is still the test's.
      expect(groupGone(started.pid)).toBe(true);
      expect(busy.listening).toBe(true);
    },
  );

  it('kiln dev --port <free port> listens there, over KILN_PORT', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-port-'));
    const port = await closedPort();
    const started = startKiln(['dev', '--port', String(port)], dir, { KILN_PORT: String(busyPort) });
    const base = await devUrl(started);
    expect(base).toBe(`http://${HOST}:${port}`);
    expect(await (await fetch(`${base}/healthz`)).json()).toEqual({ status: 'ok' });
    const { default: OpenAI } = await import('openai');
    const client = new OpenAI({
      baseURL: `${base}/v1`,
      apiKey: readFileSync(path.join(dir, 'data', 'admin.key'), 'utf8').trim(),
      maxRetries: 0,
    });
    expect((await client.models.list()).data.map((m) => m.id)).toContain('support');
    process.kill(-started.pid, 'SIGTERM');
    expect((await started.exited).code).toBe(0);
  });

  it.each([['abc'], ['70000'], ['-1'], ['80.5']])(
    'kiln dev, serve and start refuse --port %s as a usage error, before starting anything',
    async (value) => {
      dir = mkdtempSync(path.join(tmpdir(), 'kiln-port-'));
      for (const command of ['dev', 'serve', 'start']) {
        const result = await kiln([command, '--port', value], { cwd: dir });
        expect(result.code, result.stderr).toBe(1);
        expect(result.stderr).toContain(`option '--port <port>' argument '${value}' is invalid`);
        expect(result.stderr).toContain('expected a whole number from 0 to 65535');
        expect(result.stdout).toBe('');
        expect(existsSync(path.join(dir, 'data'))).toBe(false);
      }
    },
  );
});
