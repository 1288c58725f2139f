import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * The ffmpeg and ffprobe binaries Kiln ships through npm (`@ffmpeg-installer/linux-x64`,
 * `@ffprobe-installer/linux-x64`); on a platform those packages do not cover, the `ffmpeg` and
 * `ffprobe` found on PATH.
 */
function bundled(pkg: string, binary: string): string {
  try {
    return join(dirname(createRequire(import.meta.url).resolve(`${pkg}/package.json`)), binary);
  } catch {
    return binary;
  }
}

export const ffmpegPath = bundled('@ffmpeg-installer/linux-x64', 'ffmpeg');
export const ffprobePath = bundled('@ffprobe-installer/linux-x64', 'ffprobe');

/** How much of a failing run's stderr an error keeps: the end, where ffmpeg says what went wrong. */
const STDERR_TAIL = 4000;

/** ffmpeg or ffprobe could not start, exited non-zero or was killed; `stderr` is the tail of its output. */
export class MediaToolError extends Error {
  constructor(
    readonly tool: string,
    message: string,
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'MediaToolError';
  }
}

export interface RunOptions {
  /** Aborting kills the process (SIGKILL) and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Killed and rejected past this; default none. */
  timeoutMs?: number;
}

/** Runs a binary to completion; resolves with its stdout, rejects with a MediaToolError. */
function run(binary: string, args: string[], options: RunOptions = {}): Promise<Buffer> {
  const tool = binary.split('/').pop() ?? binary;
  return new Promise((resolve, reject) => {
    options.signal?.throwIfAborted();
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const stdout: Buffer[] = [];
    let stderr = '';
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      fn();
    };
    const onAbort = () => {
      child.kill('SIGKILL');
      settle(() => reject(options.signal?.reason));
    };
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            child.kill('SIGKILL');
            settle(() =>
              reject(
                new MediaToolError(tool, `${tool} timed out after ${options.timeoutMs} ms`, null, stderr),
              ),
            );
          }, options.timeoutMs);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-STDERR_TAIL);
    });
    child.once('error', (error) =>
      settle(() =>
        reject(new MediaToolError(tool, `${tool} could not start: ${error.message}`, null, stderr)),
      ),
    );
    child.once('close', (code, signal) =>
      settle(() => {
        if (code === 0) resolve(Buffer.concat(stdout));
        else {
          const why = code === null ? `was killed by ${signal}` : `exited with code ${code}`;
          const last = stderr.trim().split('\n').slice(-3).join(' | ');
          reject(new MediaToolError(tool, `${tool} ${why}${last ? `: ${last}` : ''}`, code, stderr));
        }
      }),
    );
  });
}

/** Runs ffmpeg with `-hide_banner -nostdin -loglevel error` before `args`. */
export async function runFfmpeg(args: string[], options?: RunOptions): Promise<void> {
  await run(ffmpegPath, ['-hide_banner', '-nostdin', '-loglevel', 'error', ...args], options);
}

/** Runs ffprobe and returns its stdout as text. */
export async function runFfprobe(args: string[], options?: RunOptions): Promise<string> {
  return (await run(ffprobePath, ['-hide_banner', '-loglevel', 'error', ...args], options)).toString('utf8');
}

/** What ffprobe says about a file's first video stream. */
export interface VideoProbe {
  codec: string;
  width: number;
  height: number;
  pixelFormat: string;
  /** Frames per second from the stream's `r_frame_rate`. */
  fps: number;
  /** The container's duration in seconds. */
  durationSeconds: number;
  /** Decoded frame count; only with `countFrames` (it decodes the whole stream). */
  frames?: number;
}

export async function probeVideo(
  file: string,
  options: RunOptions & { countFrames?: boolean } = {},
): Promise<VideoProbe> {
  const text = await runFfprobe(
    [
      ...(options.countFrames ? ['-count_frames'] : []),
      '-select_streams',
      'v:0',
      '-show_entries',
      'stream=codec_name,width,height,pix_fmt,r_frame_rate,nb_read_frames:format=duration',
      '-of',
      'json',
      file,
    ],
    options,
  );
  const parsed = JSON.parse(text) as {
    streams?: Array<Record<string, string | number | undefined>>;
    format?: { duration?: string };
  };
  const stream = parsed.streams?.[0];
  if (!stream) throw new MediaToolError('ffprobe', `${file} has no video stream`, 0, '');
  const [num, den] = String(stream.r_frame_rate ?? '0/1')
    .split('/')
    .map(Number);
  return {
    codec: String(stream.codec_name),
    width: Number(stream.width),
    height: Number(stream.height),
    pixelFormat: String(stream.pix_fmt),
    fps: den ? (num ?? 0) / den : 0,
    durationSeconds: Number(parsed.format?.duration ?? Number.NaN),
    ...(options.countFrames ? { frames: Number(stream.nb_read_frames) } : {}),
  };
}
