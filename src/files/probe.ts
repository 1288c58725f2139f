import sharp from 'sharp';
import { KilnError } from '../errors.js';
import { runFfprobe } from '../media/ffmpeg.js';

/** What a produced image or video measures, read from the file itself, never from what an engine claims. */
export interface MediaInfo {
  width: number;
  height: number;
  duration_ms?: number;
  fps?: number;
}

const PROBE_TIMEOUT_MS = 30_000;

/**
 * Measures the image or video at `file`; answers undefined for other content types. A file that does
 * not read as its content type is an engine's fault: 502 `inference-failed`.
 */
export async function probeMedia(file: string, contentType: string): Promise<MediaInfo | undefined> {
  const type = contentType.toLowerCase();
  try {
    if (type.startsWith('image/')) return await probeImage(file);
    if (type.startsWith('video/')) return await probeVideo(file);
  } catch (error) {
    if (error instanceof KilnError) throw error;
    throw unreadable(contentType, (error as Error).message, error);
  }
  return undefined;
}

function unreadable(contentType: string, why: string, cause?: unknown): KilnError {
  return new KilnError('inference-failed', `the produced file does not read as ${contentType}: ${why}`, {
    cause,
  });
}

async function probeImage(file: string): Promise<MediaInfo> {
  const meta = await sharp(file, { animated: true }).metadata();
  // autoOrient: a portrait photo stored landscape with an EXIF rotation is as tall as it looks.
  const width = meta.autoOrient?.width ?? meta.width;
  const pages = meta.pages ?? 1;
  const pageHeight = meta.pageHeight ?? meta.height;
  const height = pages > 1 ? pageHeight : (meta.autoOrient?.height ?? meta.height);
  const info: MediaInfo = { width, height };
  const delays = meta.delay ?? [];
  if (pages > 1 && delays.length > 0) {
    const total = delays.reduce((sum, d) => sum + d, 0);
    if (total > 0) {
      info.duration_ms = total;
      info.fps = roundFps((delays.length * 1000) / total);
    }
  }
  return info;
}

interface ProbeStream {
  codec_type?: string;
  width?: number;
  height?: number;
  avg_frame_rate?: string;
  r_frame_rate?: string;
  duration?: string;
  nb_frames?: string;
  tags?: Record<string, string>;
  side_data_list?: Array<{ rotation?: number }>;
  disposition?: { attached_pic?: number };
}

interface ProbeOutput {
  streams?: ProbeStream[];
  format?: { duration?: string };
}

async function probeVideo(file: string): Promise<MediaInfo> {
  const stdout = await runFfprobe(['-show_streams', '-show_format', '-of', 'json', file], {
    timeoutMs: PROBE_TIMEOUT_MS,
  });
  const output = JSON.parse(stdout) as ProbeOutput;
  const video = output.streams?.find((s) => s.codec_type === 'video' && !s.disposition?.attached_pic);
  if (!video?.width || !video.height) throw unreadable('video', 'ffprobe found no video stream');

  const rotation = Math.abs(
    Number(video.side_data_list?.find((d) => d.rotation !== undefined)?.rotation ?? 0),
  );
  const turned = rotation === 90 || rotation === 270;
  const info: MediaInfo = {
    width: turned ? video.height : video.width,
    height: turned ? video.width : video.height,
  };

  const fps = frameRate(video.avg_frame_rate) ?? frameRate(video.r_frame_rate);
  if (fps !== undefined) info.fps = roundFps(fps);
  const seconds =
    positive(video.duration) ??
    positive(output.format?.duration) ??
    clockSeconds(video.tags?.DURATION) ??
    (fps !== undefined && positive(video.nb_frames) !== undefined
      ? (positive(video.nb_frames) as number) / fps
      : undefined);
  if (seconds !== undefined) info.duration_ms = Math.round(seconds * 1000);
  return info;
}

/** ffprobe's rational rates ("24/1", "30000/1001"); "0/0" means unknown. */
function frameRate(text: string | undefined): number | undefined {
  const match = /^(\d+)\/(\d+)$/.exec(text ?? '');
  if (!match) return undefined;
  const rate = Number(match[1]) / Number(match[2]);
  return Number.isFinite(rate) && rate > 0 ? rate : undefined;
}

function positive(text: string | undefined): number | undefined {
  const value = Number(text);
  return text !== undefined && Number.isFinite(value) && value > 0 ? value : undefined;
}

/** Matroska keeps a stream's length as a tag such as "00:00:02.000000000". */
function clockSeconds(text: string | undefined): number | undefined {
  const match = /^(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$/.exec(text ?? '');
  if (!match) return undefined;
  const seconds = Number(match[1]) * 3600 + Number(match[2]) * 60 + Number(match[3]);
  return seconds > 0 ? seconds : undefined;
}

const roundFps = (fps: number) => Math.round(fps * 1000) / 1000;
