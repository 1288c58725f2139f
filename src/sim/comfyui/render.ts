import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { runFfmpeg } from '../../media/ffmpeg.js';
import type { Container } from './plan.js';

/**
 * Real media for the simulated runner: a clip of exactly the asked frames, size and rate that
 * cross-fades from the start image to the end image under a slow pan (ffmpeg), and pictures that
 * are a deterministic function of the prompt text and seed (sharp).
 */

/** How much larger than the frame the images are scaled, so the crop window can drift across them. */
const OVERSCAN = 1.08;

const even = (n: number) => Math.max(2, 2 * Math.ceil(n / 2));

export interface VideoSpec {
  width: number;
  height: number;
  frames: number;
  fps: number;
  /** Image files for the first and the last frame; one image gives a drift over it alone. */
  start: string;
  end?: string;
  container: Exclude<Container, 'png'>;
  /** VP9 quality for WebM (SaveWEBM's `crf`); default 32. */
  crf?: number;
  out: string;
  signal?: AbortSignal;
}

/** The ffmpeg arguments for a clip: both images decoded and scaled once, looped, faded, panned, encoded. */
export function videoArgs(spec: VideoSpec): string[] {
  const { width: w, height: h, frames, fps } = spec;
  const sw = even(w * OVERSCAN);
  const sh = even(h * OVERSCAN);
  // The fade ends on the last frame, so that frame is the end image itself.
  const span = Math.max(frames - 1, 1) / fps;
  const still = (input: number, format: string) =>
    `[${input}:v]scale=${sw}:${sh}:force_original_aspect_ratio=increase,crop=${sw}:${sh},setsar=1,` +
    `format=${format},loop=loop=${frames - 1}:size=1:start=0,setpts=N/(${fps}*TB)`;
  // crop rounds a 4:2:0 frame to even sizes; an odd size is scaled to exactly (and H.264 then
  // refuses it, as it does under ComfyUI).
  const exact = w % 2 === 1 || h % 2 === 1 ? `,scale=${w}:${h}` : '';
  const pan = `crop=${even(w)}:${even(h)}:x='(iw-ow)*min(t/${span},1)':y='(ih-oh)*min(t/${span},1)'${exact}`;
  const graph = spec.end
    ? `${still(0, 'yuv420p')}[a];${still(1, 'yuva420p')},fade=t=in:st=0:d=${span}:alpha=1[b];` +
      `[a][b]overlay=format=yuv420:shortest=1,${pan},format=yuv420p[v]`
    : `${still(0, 'yuv420p')},${pan},format=yuv420p[v]`;
  const encoder: Record<VideoSpec['container'], string[]> = {
    webm: [
      '-c:v',
      'libvpx-vp9',
      '-deadline',
      'realtime',
      '-cpu-used',
      '8',
      '-row-mt',
      '1',
      '-crf',
      String(Math.round(Math.min(63, Math.max(0, spec.crf ?? 32)))),
      '-b:v',
      '0',
      '-f',
      'webm',
    ],
    mp4: ['-c:v', 'libx264', '-preset', 'ultrafast', '-crf', '23', '-movflags', '+faststart', '-f', 'mp4'],
    mkv: ['-c:v', 'libx264', '-preset', 'ultrafast', '-crf', '23', '-f', 'matroska'],
    gif: ['-f', 'gif'],
    webp: ['-c:v', 'libwebp', '-loop', '0', '-quality', '75', '-f', 'webp'],
  };
  return [
    '-y',
    '-i',
    spec.start,
    ...(spec.end ? ['-i', spec.end] : []),
    '-filter_complex',
    graph,
    '-map',
    '[v]',
    '-frames:v',
    String(frames),
    '-r',
    String(fps),
    ...(spec.container === 'gif' || spec.container === 'webp' ? [] : ['-pix_fmt', 'yuv420p']),
    ...encoder[spec.container],
    spec.out,
  ];
}

export async function renderVideo(spec: VideoSpec): Promise<void> {
  await runFfmpeg(videoArgs(spec), spec.signal ? { signal: spec.signal } : {});
}

/**
 * A picture that depends only on `key` (the prompt text, seed and index): a two-colour gradient at
 * an angle, soft interference bands and a little grain.
 */
export async function patternPng(width: number, height: number, key: string): Promise<Buffer> {
  const hash = createHash('sha256').update(key).digest();
  const byte = (i: number) => hash[i % hash.length] as number;
  const from = [byte(0), byte(1), byte(2)];
  const to = [byte(3), byte(4), byte(5)];
  const angle = (byte(6) / 255) * Math.PI * 2;
  const [cos, sin] = [Math.cos(angle), Math.sin(angle)];
  const fx = (1 + (byte(7) % 6)) * ((2 * Math.PI) / width);
  const fy = (1 + (byte(8) % 6)) * ((2 * Math.PI) / height);
  const bandsX = Float64Array.from({ length: width }, (_, x) => Math.sin(fx * x + byte(9)));
  const bandsY = Float64Array.from({ length: height }, (_, y) => Math.sin(fy * y + byte(10)));
  let noise = hash.readUInt32LE(12) || 1;
  const pixels = Buffer.alloc(width * height * 3);
  const diagonal = Math.abs(cos) * width + Math.abs(sin) * height;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const along = ((x - width / 2) * cos + (y - height / 2) * sin) / diagonal + 0.5;
      const band = 0.12 * (bandsX[x] as number) * (bandsY[y] as number);
      noise ^= noise << 13;
      noise ^= noise >>> 17;
      noise ^= noise << 5;
      const grain = ((noise >>> 0) % 17) - 8;
      const i = (y * width + x) * 3;
      for (let c = 0; c < 3; c++) {
        const a = from[c] as number;
        const b = to[c] as number;
        pixels[i + c] = Math.max(0, Math.min(255, a + (b - a) * (along + band) + grain));
      }
    }
  }
  return sharp(pixels, { raw: { width, height, channels: 3 } })
    .png({ compressionLevel: 4 })
    .toBuffer();
}
