import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KILN_BIN, type Kiln, kilnWith } from '../helpers/cli.js';
import { waitUntil } from '../helpers/process.js';

/**
 * What `kiln images generate --out` and `kiln video … --out` do with the files they write, against
 * a small fake gateway on 127.0.0.1: every image answer has the same `created` second, each image
 * has bytes of its own, and one video downloads slowly enough to be interrupted.
 */

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const VIDEO_ID = 'vidgen-01a21d72-0000-7000-8000-000000000001';

let workDir: string;
let gateway: Server;
let base: string;
/** The submissions the gateway took (POSTs), in order. */
const submissions: string[] = [];
let kiln: Kiln;

beforeAll(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'kiln-media-files-'));
  let images = 0;
  let slow = false;
  gateway = createServer((request, response) => {
    const json = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    const url = request.url ?? '';
    if (request.method === 'POST') {
      submissions.push(url);
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk;
      });
      request.on('end', () => {
        if (url === '/v1/images/generations') {
          images++;
          return json(200, { created: 1795790000, data: [{ url: `${base}/files/image-${images}` }] });
        }
        slow = JSON.parse(body).prompt === 'slow';
        json(202, {
          id: VIDEO_ID,
          object: 'video.generation',
          status: 'queued',
          polling_url: `/v1/jobs/${VIDEO_ID.slice('vidgen-'.length)}`,
          created: 1795790000,
          model: 'ltx-video',
          size: '512x512',
        });
      });
      return;
    }
    if (url.startsWith('/files/image-')) {
      response.writeHead(200, { 'content-type': 'image/png' });
      return response.end(Buffer.concat([PNG_MAGIC, Buffer.from(url)]));
    }
    if (url.startsWith('/v1/jobs/')) {
      const result = {
        url: `${base}/files/${slow ? 'slow' : 'video'}?signature=abc`,
        file_id: 'file_1',
        duration_ms: 1000,
        width: 512,
        height: 512,
        fps: 24,
        content_type: 'video/webm',
      };
      const job = { id: VIDEO_ID, object: 'job', kind: 'video.generation', status: 'completed' };
      return json(200, { ...job, created: 1, started_at: 1, finished_at: 2, progress: 1, result });
    }
    if (url.startsWith('/files/video')) {
      response.writeHead(200, { 'content-type': 'video/webm' });
      return response.end('a new video');
    }
    if (url.startsWith('/files/slow')) {
      // 1 MB at 100 KB/s: ten seconds to interrupt it in.
      response.writeHead(200, { 'content-type': 'video/webm', 'content-length': 1_000_000 });
      const timer = setInterval(() => response.write(Buffer.alloc(10_000)), 100);
      response.on('close', () => clearInterval(timer));
      return;
    }
    json(404, {
      error: { type: 'invalid_request_error', code: 'route-not-found', message: `no route ${url}` },
    });
  });
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
  kiln = kilnWith({ cwd: workDir, env: { KILN_BASE_URL: base, KILN_API_KEY: 'kiln_sk_any' } });
});

afterAll(async () => {
  await new Promise((resolve) => gateway?.close(resolve));
  gateway?.closeAllConnections();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe('kiln images generate --out and kiln video --out never write over a file', () => {
  it('runs in parallel into one directory, in the same second, each save an image of their own', async () => {
    const runs = await Promise.all(
      ['a red cat', 'a blue dog', 'a green frog'].map((prompt) =>
        kiln(['images', 'generate', '--prompt', prompt, '--out', 'pics/']),
      ),
    );
    const saved = runs.map((run) => {
      expect(run.code, run.stderr).toBe(0);
      const match = /^saved (pics\/image-1795790000(-\d)?\.png) \(\d+ B\)\n$/.exec(run.stdout);
      expect(match, run.stdout).not.toBeNull();
      return match?.[1] as string;
    });
    expect(new Set(saved).size).toBe(3);
    const files = readdirSync(path.join(workDir, 'pics')).sort();
    expect(files).toEqual(['image-1795790000-2.png', 'image-1795790000-3.png', 'image-1795790000.png']);
    // Three different images: none was written over by another run.
    const contents = files.map((name) => readFileSync(path.join(workDir, 'pics', name), 'latin1'));
    expect(new Set(contents).size).toBe(3);
  });

  it('refuses an existing --out file before submitting anything, and replaces it with --force', async () => {
    writeFileSync(path.join(workDir, 'keep.webm'), 'precious');
    writeFileSync(path.join(workDir, 'keep.png'), 'precious too');
    const before = submissions.length;
    const [video, image] = await Promise.all([
      kiln(['video', 'generate', '--prompt', 'waves', '--out', 'keep.webm']),
      kiln(['images', 'generate', '--prompt', 'a cup', '--out', 'keep.png']),
    ]);
    expect([video, image].map((r) => [r.code, r.stdout, r.stderr])).toEqual([
      [1, '', 'kiln: keep.webm exists already; add --force to replace it\n'],
      [1, '', 'kiln: keep.png exists already; add --force to replace it\n'],
    ]);
    expect(submissions.length).toBe(before);
    expect(readFileSync(path.join(workDir, 'keep.webm'), 'utf8')).toBe('precious');
    expect(readFileSync(path.join(workDir, 'keep.png'), 'utf8')).toBe('precious too');

    const forced = await kiln(['video', 'generate', '--prompt', 'waves', '--out', 'keep.webm', '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain('saved keep.webm (11 B)\n');
    expect(readFileSync(path.join(workDir, 'keep.webm'), 'utf8')).toBe('a new video');
  });
});

describe('kiln video --out: Ctrl-C during the download', () => {
  it('removes the partial file, says how to fetch the video later and exits 130', async () => {
    const dir = path.join(workDir, 'dl');
    mkdirSync(dir);
    const child = spawn(
      process.execPath,
      [KILN_BIN, 'video', 'generate', '--prompt', 'slow', '--out', 'dl/clip.webm'],
      {
        cwd: workDir,
        env: { PATH: process.env.PATH ?? '', KILN_BASE_URL: base, KILN_API_KEY: 'kiln_sk_any' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk;
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    // Interrupt once the download is under way.
    await waitUntil(() => readdirSync(dir).some((name) => name.endsWith('.part')), {
      timeoutMs: 8000,
      describe: () => `a partial download in ${dir}; stderr: ${stderr}`,
    });
    child.kill('SIGINT');
    expect(await exited).toEqual({ code: 130, signal: null });
    expect(readdirSync(dir)).toEqual([]);
    expect(stderr).toBe(
      'progress 100%\n' +
        `kiln: download stopped, dl/clip.webm not saved; the video is still there: kiln jobs get ${VIDEO_ID} prints its URL\n`,
    );
    expect(existsSync(path.join(dir, 'clip.webm'))).toBe(false);
  });
});
