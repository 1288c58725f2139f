import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KILN_BIN } from '../helpers/cli.js';
import { REPO_ROOT, waitUntil } from '../helpers/process.js';

const run = promisify(execFile);

/**
 * The README's video transition, as written — the curl with its body file and the CLI — with the
 * sample keyframes the repository ships (about 90 KB each, too big for a command line), against
 * `kiln dev`'s simulated ComfyUI runner.
 */
describe('the README transition examples', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kiln-readme-media-'));
  let dev: ChildProcess;
  let base: string;
  let key: string;
  const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  /** The README's lines for this example, pointed at this gateway and the repository's examples/. */
  const lines = (from: string, to: string) => {
    const start = readme.indexOf(from);
    const end = readme.indexOf(to, start);
    expect(start, `README has "${from}"`).toBeGreaterThan(-1);
    expect(end, `README has "${to}"`).toBeGreaterThan(-1);
    return readme
      .slice(start, end + to.length)
      .replaceAll('http://127.0.0.1:8080', base)
      .replaceAll('examples/', `${path.join(REPO_ROOT, 'examples')}/`);
  };

  beforeAll(async () => {
    dev = spawn(process.execPath, [KILN_BIN, 'dev'], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', KILN_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    base = await new Promise<string>((resolve, reject) => {
      let seen = '';
      dev.once('exit', (code) => reject(new Error(`kiln dev exited with ${code}: ${seen}`)));
      dev.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
        seen += chunk;
        const match = /Kiln dev is running at (\S+)\/v1/.exec(seen);
        if (match) resolve(match[1] as string);
      });
    });
    key = readFileSync(path.join(dir, 'data', 'admin.key'), 'utf8').trim();
  }, 60_000);
  afterAll(async () => {
    dev?.kill('SIGTERM');
    await new Promise((r) => dev?.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  });

  it('the curl with its body file submits the sample keyframes, and the job renders a 1280x704 clip', async () => {
    expect(statSync(path.join(REPO_ROOT, 'examples', 'start.png')).size).toBeGreaterThan(64 * 1024);
    const script = lines(`printf '{"start_image"`, '-d @transition.json');
    const { stdout } = await run('bash', ['-c', script], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', KILN_API_KEY: key },
      maxBuffer: 4 * 1024 * 1024,
    });
    const accepted = JSON.parse(stdout);
    expect(accepted).toMatchObject({ object: 'video.transition', size: '1280x704', size_adjusted: true });
    const job = await waitUntil(
      async () => {
        const answer = await fetch(`${base}${accepted.polling_url}`, {
          headers: { authorization: `Bearer ${key}` },
        });
        const body = (await answer.json()) as { status: string; result?: { width: number; height: number } };
        return body.status === 'queued' || body.status === 'running' ? undefined : body;
      },
      { timeoutMs: 60_000 },
    );
    expect(job).toMatchObject({ status: 'completed', result: { width: 1280, height: 704 } });
  });

  it('the CLI line renders the same keyframes into clips/', async () => {
    const line = lines('npx kiln video transition', '--out clips/').replace(/^npx kiln /, '');
    const args = line.match(/"[^"]*"|\S+/g)?.map((a) => a.replace(/^"|"$/g, '')) ?? [];
    const { stderr } = await run(process.execPath, [KILN_BIN, ...args], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', KILN_BASE_URL: base, KILN_API_KEY: key },
      timeout: 60_000,
    });
    const clips = readdirSync(path.join(dir, 'clips'));
    expect(clips, stderr).toHaveLength(1);
    expect(statSync(path.join(dir, 'clips', clips[0] as string)).size).toBeGreaterThan(1000);
  });
});
