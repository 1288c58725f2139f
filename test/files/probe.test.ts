import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeMedia } from '../../src/files/probe.js';
import { runFfmpeg } from '../../src/media/ffmpeg.js';
import { makePng, makeWebm } from './media.js';

/** Measurements come from the file itself. */
describe('probeMedia', () => {
  let dir: string;
  const file = (name: string, data: Buffer) => {
    const target = path.join(dir, name);
    writeFileSync(target, data);
    return target;
  };

  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-probe-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads a WebM: size, length and frame rate', async () => {
    const webm = path.join(dir, 'in.webm');
    writeFileSync(webm, await makeWebm(dir));
    expect(await probeMedia(webm, 'video/webm')).toEqual({
      width: 320,
      height: 240,
      duration_ms: 2000,
      fps: 24,
    });
  });

  it('reads an NTSC-rate MP4 shot sideways as it plays: upright, 29.97 fps', async () => {
    const flat = path.join(dir, 'flat.mp4');
    const turned = path.join(dir, 'turned.mp4');
    await runFfmpeg([
      '-f',
      'lavfi',
      '-i',
      'testsrc=size=320x240:rate=30000/1001',
      '-frames:v',
      '30',
      '-c:v',
      'libx264',
      '-pix_fmt',
      'yuv420p',
      '-y',
      flat,
    ]);
    await runFfmpeg(['-i', flat, '-c', 'copy', '-metadata:s:v:0', 'rotate=90', '-y', turned]);
    expect(await probeMedia(flat, 'video/mp4')).toEqual({
      width: 320,
      height: 240,
      duration_ms: 1001,
      fps: 29.97,
    });
    expect(await probeMedia(turned, 'video/mp4')).toMatchObject({ width: 240, height: 320 });
  });

  it('reads images: PNG, an EXIF-rotated JPEG as it displays, an animated WebP by frame', async () => {
    expect(await probeMedia(file('a.png', await makePng(64, 48)), 'image/png')).toEqual({
      width: 64,
      height: 48,
    });

    const jpeg = await sharp({ create: { width: 40, height: 30, channels: 3, background: 'red' } })
      .jpeg()
      .withMetadata({ orientation: 6 })
      .toBuffer();
    expect(await probeMedia(file('a.jpg', jpeg), 'image/jpeg')).toEqual({ width: 30, height: 40 });

    // Three 40x30 frames of different grey, shown 100, 100 and 200 ms.
    const frames = Buffer.alloc(40 * 90 * 3);
    for (let i = 0; i < frames.length; i++) frames[i] = Math.floor(i / (40 * 30 * 3)) * 100;
    const webp = await sharp(frames, { raw: { width: 40, height: 90, channels: 3, pageHeight: 30 } })
      .webp({ delay: [100, 100, 200], loop: 0 })
      .toBuffer();
    expect(await probeMedia(file('a.webp', webp), 'image/webp')).toEqual({
      width: 40,
      height: 30,
      duration_ms: 400,
      fps: 7.5,
    });
  });

  it('leaves other content types unmeasured', async () => {
    expect(await probeMedia(file('a.json', Buffer.from('{}')), 'application/json')).toBeUndefined();
  });

  it('calls a file that does not read as its type an engine failure', async () => {
    const junk = file('junk', Buffer.from('certainly not media'));
    await expect(probeMedia(junk, 'video/mp4')).rejects.toMatchObject({ code: 'inference-failed' });
    await expect(probeMedia(junk, 'image/png')).rejects.toMatchObject({ code: 'inference-failed' });
    // An audio-only file is not a video.
    const audio = path.join(dir, 'tone.webm');
    await runFfmpeg(['-f', 'lavfi', '-i', 'sine=duration=0.5', '-c:a', 'libopus', '-y', audio]);
    await expect(probeMedia(audio, 'video/webm')).rejects.toMatchObject({
      code: 'inference-failed',
      message: expect.stringContaining('no video stream'),
    });
  });
});
