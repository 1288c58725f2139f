import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeVideo } from '../../src/media/ffmpeg.js';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * `kiln video …`, `kiln images generate` and `kiln jobs wait` as a user runs them (`node bin/kiln.js`,
 * stderr a pipe, so progress comes as `progress N%` lines), against a real gateway whose one runner
 * is the ComfyUI simulator with the LTX-Video and SDXL model files installed (and not Wan's).
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The percentages of the `progress N%` lines; every stderr line must be one. */
function progressLines(stderr: string): number[] {
  const lines = stderr.trimEnd().split('\n');
  for (const line of lines) expect(line).toMatch(/^progress \d{1,3}%$/);
  return lines.map((line) => Number(line.slice('progress '.length, -1)));
}

function expectProgressTo100(stderr: string): void {
  const percents = progressLines(stderr);
  expect(percents.length, stderr).toBeGreaterThanOrEqual(2);
  expect(percents.at(-1)).toBe(100);
  for (let i = 1; i < percents.length; i++) {
    const step = (percents[i] as number) - (percents[i - 1] as number);
    // One line per change of at least 10 %, except the closing 100 %.
    if (percents[i] !== 100) expect(step, stderr).toBeGreaterThanOrEqual(10);
    else expect(step, stderr).toBeGreaterThan(0);
  }
}

describe('kiln video, kiln images and kiln jobs wait against a simulated ComfyUI runner', () => {
  let workDir: string;
  let sim: ComfySim;
  let server: TestServer;
  let kiln: Kiln;

  beforeAll(async () => {
    workDir = mkdtempSync(path.join(tmpdir(), 'kiln-media-cli-'));
    // About 1.5 s of sampling per prompt: long enough for several polls at 100 ms.
    sim = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 75, steps: 20 });
    server = await startTestServer(sqlite, {
      runners: { gpu: { url: sim.url, models: ['ltx-video', 'sdxl'] } },
      'jobs.poll_interval_ms': 100,
    });
    const png = (background: string) =>
      sharp({ create: { width: 96, height: 64, channels: 3, background } })
        .png()
        .toBuffer();
    writeFileSync(path.join(workDir, 'a.png'), await png('#c05020'));
    writeFileSync(path.join(workDir, 'b.png'), await png('#2050c0'));
    writeFileSync(path.join(workDir, 'notes.png'), 'not an image at all\n');
    kiln = kilnWith({
      cwd: workDir,
      env: { KILN_BASE_URL: server.url, KILN_API_KEY: server.adminKey },
      timeoutMs: 30_000,
    });
  });
  afterAll(async () => {
    await server?.close();
    await sim?.close();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('video transition --out waits with progress, prints the result and saves a 512x512 video', async () => {
    const run = await kiln([
      'video',
      'transition',
      '--start',
      'a.png',
      '--end',
      'b.png',
      '--prompt',
      'the glaze melts from orange to blue',
      '--size',
      '512x512',
      '--duration',
      '1',
      '--seed',
      '7',
      '--interval',
      '100',
      '--out',
      'clip.webm',
    ]);
    expect(run.code, run.stderr).toBe(0);
    expectProgressTo100(run.stderr);

    const lines = run.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(new RegExp(`^submitted vidgen-${UUID} \\(queued\\); poll /v1/jobs/${UUID}$`));
    expect(lines[1]).toBe('model ltx-video, size 512x512');
    expect(lines[2]).toMatch(
      new RegExp(`^completed vidgen-${UUID}: 512x512, 1\\.\\d s at [\\d.]+ fps \\(video/webm\\)$`),
    );
    expect(lines[3]).toMatch(
      /^url http:\/\/127\.0\.0\.1:\d+\/v1\/files\/file_[0-9a-f]{32}\/content\?expires=\d+&signature=[0-9a-f]{64}$/,
    );
    expect(lines[4]).toMatch(/^saved clip\.webm \(\d+(\.\d)? (B|KB|MB)\)$/);
    expect(lines).toHaveLength(5);

    const clip = path.join(workDir, 'clip.webm');
    expect(statSync(clip).size).toBeGreaterThan(0);
    const probe = await probeVideo(clip);
    expect(probe).toMatchObject({ width: 512, height: 512 });
    expect(probe.durationSeconds).toBeGreaterThan(0.5);
    // No partial download is left behind.
    expect(readdirSync(workDir).filter((name) => name.endsWith('.part'))).toEqual([]);
  });

  it('says when the size was snapped, and without --wait only submits', async () => {
    const run = await kiln([
      'video',
      'transition',
      '--start',
      'a.png',
      '--size',
      '1280x720',
      '--duration',
      '1',
    ]);
    expect(run.code, run.stderr).toBe(0);
    // Without a wait: the job id alone on stdout (for `id=$(…)`), the words on stderr.
    const id = run.stdout.trimEnd();
    expect(id).toMatch(new RegExp(`^vidgen-${UUID}$`));
    expect(run.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(new RegExp(`^submitted ${id} \\(queued\\); poll /v1/jobs/${UUID}$`)),
      'model ltx-video, size 1280x704 (adjusted from 1280x720: sides snap down to multiples of 32)',
      `wait for it: kiln jobs wait ${id}`,
    ]);
    // Not needed further: free the runner for the other tests.
    const cancelled = await kiln(['jobs', 'cancel', id]);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(JSON.parse(cancelled.stdout)).toMatchObject({ id, status: 'cancelled' });
  });

  it('a model the runner lacks fails with workflow-model-missing and the runner’s own words', async () => {
    const run = await kiln([
      'video',
      'transition',
      '--start',
      'a.png',
      '--model',
      'wan-2.2',
      '--size',
      '512x512',
      '--duration',
      '1',
      '--wait',
      '--interval',
      '100',
    ]);
    expect(run.code).toBe(1);
    const id = /^submitted (vidgen-\S+) /.exec(run.stdout)?.[1] as string;
    expect(id, run.stdout).toBeDefined();
    expect(run.stdout).toContain('model wan-2.2, size 512x512');
    const job = (await server.call('GET', `/v1/jobs/${id}`)).body;
    expect(job).toMatchObject({ status: 'failed', code: 'workflow-model-missing', model: 'wan-2.2' });
    expect(job.upstreamError).toEqual(expect.any(String));
    const failure = run.stderr.split('\n').filter((line) => !/^progress \d+%$/.test(line));
    // The runner's text is printed verbatim, once: in the message when that quotes it, else on a line of its own.
    const quoted = (job.message as string).includes(job.upstreamError);
    expect(failure).toEqual([
      `kiln: job ${id} failed: workflow-model-missing: ${job.message}`,
      ...(quoted ? [] : [`  the runner said: ${job.upstreamError}`]),
      '',
    ]);
    expect(run.stderr).toContain(job.upstreamError);
    expect(job.upstreamError).toMatch(/wan2\.2/);
  });

  it('images generate --n 2 --out dir/ saves two PNGs; --b64 --out file.png numbers them', async () => {
    const [byUrl, inline] = await Promise.all([
      kiln([
        'images',
        'generate',
        '--prompt',
        'a celadon bowl',
        '--n',
        '2',
        '--size',
        '512x512',
        '--out',
        'pics/',
      ]),
      kiln([
        'images',
        'generate',
        '--prompt',
        'a tenmoku cup',
        '--n',
        '2',
        '--size',
        '512x512',
        '--b64',
        '--out',
        'cup.png',
      ]),
    ]);
    expect(byUrl.code, byUrl.stderr).toBe(0);
    expect(byUrl.stderr).toBe('');
    const saved = readdirSync(path.join(workDir, 'pics')).sort((a, b) => a.length - b.length);
    expect(saved).toHaveLength(2);
    expect(saved[0]).toMatch(/^image-\d+\.png$/);
    expect(saved[1]).toBe((saved[0] as string).replace('.png', '-2.png'));
    expect(byUrl.stdout).toMatch(
      /^saved pics\/image-\d+\.png \(.+\)\nsaved pics\/image-\d+-2\.png \(.+\)\n$/,
    );

    expect(inline.code, inline.stderr).toBe(0);
    expect(inline.stdout).toMatch(/^saved cup\.png \(.+\)\nsaved cup-2\.png \(.+\)\n$/);
    for (const file of [...saved.map((name) => path.join('pics', name)), 'cup.png', 'cup-2.png']) {
      const bytes = readFileSync(path.join(workDir, file));
      expect(bytes.subarray(0, 8).equals(PNG_MAGIC), file).toBe(true);
      expect(await sharp(bytes).metadata()).toMatchObject({ format: 'png', width: 512, height: 512 });
    }
  });

  it('kiln jobs wait shows the progress of a running video job and prints the job', async () => {
    const submitted = await kiln([
      'video',
      'transition',
      '--start',
      'b.png',
      '--size',
      '512x512',
      '--duration',
      '1',
      '--json',
    ]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const { id } = JSON.parse(submitted.stdout);
    expect(id).toMatch(new RegExp(`^vidgen-${UUID}$`));

    const waited = await kiln(['jobs', 'wait', id, '--interval', '100']);
    expect(waited.code, waited.stderr).toBe(0);
    expectProgressTo100(waited.stderr);
    const job = JSON.parse(waited.stdout);
    expect(job).toMatchObject({
      id,
      object: 'job',
      kind: 'video.transition',
      status: 'completed',
      progress: 1,
    });
    expect(job.result).toMatchObject({ width: 512, height: 512, content_type: 'video/webm' });
  });

  it('--wait --json prints the finished job as GET /v1/jobs/<id> answers it, for images as for video', async () => {
    const waitJson = ['--size', '512x512', '--interval', '100', '--wait', '--json'];
    const [video, images] = await Promise.all([
      kiln(['video', 'transition', '--start', 'a.png', '--duration', '1', ...waitJson]),
      kiln(['images', 'generate', '--prompt', 'a shino jar', '--async', ...waitJson]),
    ]);
    for (const [run, kind, prefix] of [
      [video, 'video.transition', 'vidgen'],
      [images, 'image.generation', 'imggen'],
    ] as const) {
      expect(run.code, run.stderr).toBe(0);
      const job = JSON.parse(run.stdout);
      expect(job).toMatchObject({ object: 'job', kind, status: 'completed', progress: 1 });
      expect(job.id).toMatch(new RegExp(`^${prefix}-${UUID}$`));
      // The same document as the job's poll, and as kiln jobs wait prints it (each answer signs
      // its file URLs afresh, so those are compared up to their query).
      const unsigned = (value: unknown) =>
        JSON.parse(JSON.stringify(value).replace(/(\/content)\?[^"]*/g, '$1'));
      const polled = await server.call('GET', `/v1/jobs/${job.id}`);
      expect(polled.status).toBe(200);
      expect(unsigned(job)).toEqual(unsigned(polled.body));
      const waited = await kiln(['jobs', 'wait', job.id]);
      expect(waited.code, waited.stderr).toBe(0);
      expect(unsigned(JSON.parse(waited.stdout))).toEqual(unsigned(job));
    }
    const image = JSON.parse(images.stdout).result.data[0];
    expect(image.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1\/files\/file_[0-9a-f]{32}\/content\?/);
  });

  it('refuses a file that is not an image, and an http:// URL, before calling the gateway', async () => {
    const [notImage, http, missing] = await Promise.all([
      kiln(['video', 'transition', '--start', 'notes.png']),
      kiln(['video', 'generate', '--prompt', 'x', '--image', 'http://example.com/a.png']),
      kiln(['video', 'transition', '--start', 'a.png', '--end', 'missing.png']),
    ]);
    expect([notImage, http, missing].map((r) => [r.code, r.stdout, r.stderr])).toEqual([
      [
        1,
        '',
        'kiln: notes.png is not a PNG, JPEG or WebP image (by its content); --start takes one of those, or an https:// URL\n',
      ],
      [
        1,
        '',
        "kiln: --image takes a local PNG, JPEG or WebP file or an https:// URL, not 'http://example.com/a.png' (the gateway fetches https:// only)\n",
      ],
      [1, '', 'kiln: cannot read --end missing.png: no such file\n'],
    ]);
  });
});
