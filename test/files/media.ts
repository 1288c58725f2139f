import { readFile } from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { runFfmpeg } from '../../src/media/ffmpeg.js';

/** A real 2 s, 24 fps, 320x240 VP9 WebM, made by the ffmpeg Kiln ships. */
export async function makeWebm(dir: string): Promise<Buffer> {
  const file = path.join(dir, 'clip.webm');
  await runFfmpeg([
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=320x240:rate=24',
    '-frames:v',
    '48',
    '-c:v',
    'libvpx-vp9',
    '-deadline',
    'realtime',
    '-y',
    file,
  ]);
  return readFile(file);
}

/** A 64x48 PNG of noise-free colour, a few hundred bytes. */
export function makePng(width = 64, height = 48): Promise<Buffer> {
  return sharp({ create: { width, height, channels: 3, background: { r: 200, g: 80, b: 20 } } })
    .png()
    .toBuffer();
}
