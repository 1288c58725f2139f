import { mkdir, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import type {
  ImageRequest,
  ImagesResult,
  Job,
  KilnClient,
  TransitionRequest,
  VideoGenerationRequest,
  VideoResult,
  VideoSubmission,
} from '../client/index.js';
import { clientFromEnv, sayPollRetry, stopWaitingOnInterrupt, UsageError } from './common.js';
import { formatBytes, Progress } from './progress.js';

/** `kiln video transition|generate` and `kiln images generate` (DESIGN.md sections 7 and 8). */

interface CommonOptions {
  prompt?: string;
  negativePrompt?: string;
  model?: string;
  size?: string;
  seed?: string;
  wait?: boolean;
  out?: string;
  force?: boolean;
  json?: boolean;
  interval: string;
}

interface VideoOptions extends CommonOptions {
  start?: string;
  end?: string;
  image?: string;
  duration?: string;
}

interface ImageOptions extends CommonOptions {
  n?: string;
  b64?: boolean;
  async?: boolean;
}

const stdout = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const stderr = (line: string): void => {
  process.stderr.write(`${line}\n`);
};
const printJson = (value: unknown) => stdout(JSON.stringify(value, null, 2));

function integer(flag: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${flag} must be a whole number from ${min} to ${max}, not '${value}'`);
  }
  return n;
}

/** The image type of a file from its first bytes (its name may say anything). */
export function imageTypeOf(bytes: Buffer): 'image/png' | 'image/jpeg' | 'image/webp' | undefined {
  if (bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])))
    return 'image/png';
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP')
    return 'image/webp';
  return undefined;
}

/** An image option: an https:// URL goes as it is; a local file is sent as a data: URI. */
async function imageRef(flag: string, value: string): Promise<string> {
  if (/^https:\/\//i.test(value) || /^data:image\//i.test(value)) return value;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) {
    throw new UsageError(
      `${flag} takes a local PNG, JPEG or WebP file or an https:// URL, not '${value}' (the gateway fetches https:// only)`,
    );
  }
  let bytes: Buffer;
  try {
    bytes = await readFile(value);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a directory' : (code ?? '');
    throw new UsageError(`cannot read ${flag} ${value}: ${why || (error as Error).message}`);
  }
  const type = imageTypeOf(bytes);
  if (!type) {
    throw new UsageError(
      `${value} is not a PNG, JPEG or WebP image (by its content); ${flag} takes one of those, or an https:// URL`,
    );
  }
  return `data:${type};base64,${bytes.toString('base64')}`;
}

const EXTENSIONS: Record<string, string> = {
  'video/webm': '.webm',
  'video/mp4': '.mp4',
  'video/quicktime': '.mov',
  'image/gif': '.gif',
  'image/png': '.png',
  'image/jpeg': '.jpg',
  'image/webp': '.webp',
};

type OutTarget = { dir: string } | { file: string };

/**
 * Where --out points: a directory (an existing one, or a path ending in /), or a file whose
 * directory exists. The `count` files it will take (`file.png`, `file-2.png` …) must not exist
 * unless --force: checked before the job is submitted, so that no work is paid for in vain.
 */
async function outTarget(out: string, count: number, force: boolean): Promise<OutTarget> {
  const found = await stat(out).catch(() => undefined);
  if (found?.isDirectory()) return { dir: out };
  if (/[/\\]$/.test(out)) {
    await mkdir(out, { recursive: true });
    return { dir: out };
  }
  const parent = path.dirname(path.resolve(out));
  const parentIsDir = await stat(parent).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!parentIsDir) throw new UsageError(`--out ${out}: there is no directory ${parent} to write it in`);
  for (let index = 0; index < count && !force; index++) {
    const file = numbered(out, index);
    if (await stat(file).catch(() => undefined)) {
      throw new UsageError(`${file} exists already; add --force to replace it`);
    }
  }
  return { file: out };
}

/** Creates `file`, empty, unless something is there: the name is this run's, and no other run's. */
async function claim(file: string): Promise<boolean> {
  try {
    await (await open(file, 'wx')).close();
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}

/** Where one result is saved; `claimed` when this run created the file, so a failed save removes it. */
interface Destination {
  file: string;
  claimed: boolean;
}

/**
 * The file for the index-th result: in a directory, the first of `name`, `name-2` … that nothing
 * holds, claimed at once, so that runs in parallel (or in the same second) never write over each
 * other; else the --out file (numbered), replaced only with --force.
 */
async function destination(
  target: OutTarget,
  name: string,
  index: number,
  force: boolean,
): Promise<Destination> {
  if ('dir' in target) {
    for (let n = 0; ; n++) {
      const file = numbered(path.join(target.dir, name), n);
      if (await claim(file)) return { file, claimed: true };
    }
  }
  const file = numbered(target.file, index);
  if (force) return { file, claimed: false };
  if (await claim(file)) return { file, claimed: true };
  throw new UsageError(`${file} appeared while the job ran; add --force to replace it`);
}

/** The i-th (0-based) of several files: `file.png`, `file-2.png`, `file-3.png` … */
function numbered(file: string, index: number): string {
  if (index === 0) return file;
  const ext = path.extname(file);
  return `${file.slice(0, file.length - ext.length)}-${index + 1}${ext}`;
}

/**
 * Polls the job with a progress bar on stderr until it is terminal. Ctrl-C stops waiting, not the
 * job, and says how to pick it up again.
 */
async function waitWithProgress(client: KilnClient, id: string, intervalMs: number): Promise<Job> {
  const progress = new Progress(id, { eager: true });
  const stopWatching = stopWaitingOnInterrupt(id, () => progress.clear());
  try {
    const job = await client.jobs.wait(id, {
      intervalMs,
      onProgress: (polled) => progress.update(polled),
      onRetry: sayPollRetry(id, () => progress.end()),
    });
    progress.finish(job);
    return job;
  } catch (error) {
    progress.end();
    throw error;
  } finally {
    stopWatching();
  }
}

/** Reports a job that ended without completing (its code, message and the runner's own words), and fails. */
function reportFailure(job: Job): void {
  const code = job.code ?? job.status;
  stderr(`kiln: job ${job.id} ${job.status}: ${code}: ${job.message ?? `the job ended ${job.status}`}`);
  const upstream = job.upstreamError;
  // The runner's own words, unless the message already quotes them.
  if (typeof upstream === 'string' && upstream !== '' && !(job.message ?? '').includes(upstream)) {
    stderr(`  the runner said: ${upstream}`);
  }
  process.exitCode = 1;
}

/**
 * Downloads a file URL with a byte count on a terminal; answers the path and size written. Ctrl-C
 * stops the download, leaves no partial file, says where the result still is and exits 130.
 */
async function download(
  client: KilnClient,
  url: string,
  to: Destination,
  stillThere: string,
): Promise<string> {
  const progress = new Progress(path.basename(to.file));
  const interrupt = new AbortController();
  const onInterrupt = () => interrupt.abort();
  process.once('SIGINT', onInterrupt);
  try {
    const saved = await client.files.download(url, to.file, {
      signal: interrupt.signal,
      onProgress: ({ received, total }) => progress.bytes('downloading', received, total),
    });
    progress.clear();
    return `saved ${saved.path} (${formatBytes(saved.bytes)})`;
  } catch (error) {
    progress.end();
    if (to.claimed) await rm(to.file, { force: true });
    if (!interrupt.signal.aborted) throw error;
    stderr(`kiln: download stopped, ${to.file} not saved; ${stillThere}`);
    process.exit(130);
  } finally {
    process.removeListener('SIGINT', onInterrupt);
  }
}

const intervalOf = (value: string) => integer('--interval', value, 10, 60_000) as number;

async function runVideo(
  options: VideoOptions,
  submit: (client: KilnClient) => Promise<VideoSubmission>,
): Promise<void> {
  const intervalMs = intervalOf(options.interval);
  const force = options.force === true;
  const target = options.out === undefined ? undefined : await outTarget(options.out, 1, force);
  const wait = options.wait === true || target !== undefined;
  const json = options.json === true;
  // With --json, stdout holds the JSON alone; without a wait, the job id alone (for
  // `id=$(kiln video generate …)`). The words go to stderr then.
  const say = json || !wait ? stderr : stdout;
  const client = clientFromEnv();
  const submitted = await submit(client);

  if (json && !wait) return printJson(submitted);
  say(`submitted ${submitted.id} (${submitted.status}); poll ${submitted.polling_url}`);
  const notes: string[] = [];
  const adjusted = submitted.size_adjusted ?? (options.size !== undefined && submitted.size !== options.size);
  if (adjusted) {
    notes.push(`adjusted${options.size ? ` from ${options.size}` : ''}: sides snap down to multiples of 32`);
  }
  if (options.model !== undefined && submitted.model !== options.model) {
    notes.push(`your key's tier renders with ${submitted.model}, not ${options.model}`);
  }
  say(`model ${submitted.model}, size ${submitted.size}${notes.length ? ` (${notes.join('; ')})` : ''}`);
  if (!wait) {
    stderr(`wait for it: kiln jobs wait ${submitted.id}`);
    stdout(submitted.id);
    return;
  }

  const job = await waitWithProgress(client, submitted.id, intervalMs);
  if (json) printJson(job);
  if (job.status !== 'completed') return reportFailure(job);
  const result = job.result as VideoResult;
  const seconds = result.duration_ms === null ? '?' : (result.duration_ms / 1000).toFixed(1);
  const fps = result.fps === null ? '' : ` at ${Math.round(result.fps * 100) / 100} fps`;
  say(
    `completed ${job.id}: ${result.width ?? '?'}x${result.height ?? '?'}, ${seconds} s${fps} (${result.content_type})`,
  );
  say(`url ${result.url}`);
  if (!target) return;

  const ext = EXTENSIONS[result.content_type] ?? '';
  const to = await destination(target, `${job.id}${ext}`, 0, force);
  const file = to.file;
  if (
    'file' in target &&
    ext &&
    path.extname(file).toLowerCase() !== ext &&
    !(ext === '.jpg' && /\.jpe?g$/i.test(file))
  ) {
    stderr(`note: the video is ${result.content_type}; ${file} holds it as it is`);
  }
  say(
    await download(
      client,
      result.url,
      to,
      `the video is still there: kiln jobs get ${job.id} prints its URL`,
    ),
  );
}

async function runImages(options: ImageOptions): Promise<void> {
  if (!options.prompt) throw new UsageError('say what to draw: --prompt <text>');
  if (options.wait && !options.async) {
    throw new UsageError('--wait goes with --async (without --async, kiln images generate waits anyway)');
  }
  const n = integer('--n', options.n, 1, 4);
  const seed = integer('--seed', options.seed, 0, 4294967295);
  const intervalMs = intervalOf(options.interval);
  const force = options.force === true;
  const target = options.out === undefined ? undefined : await outTarget(options.out, n ?? 1, force);
  const json = options.json === true;
  const say = json ? stderr : stdout;
  const body: Omit<ImageRequest, 'mode'> = {
    prompt: options.prompt,
    ...(options.model === undefined ? {} : { model: options.model }),
    ...(n === undefined ? {} : { n }),
    ...(options.size === undefined ? {} : { size: options.size as NonNullable<ImageRequest['size']> }),
    ...(seed === undefined ? {} : { seed }),
    ...(options.negativePrompt === undefined ? {} : { negative_prompt: options.negativePrompt }),
    ...(options.b64 ? { response_format: 'b64_json' as const } : {}),
  };
  const client = clientFromEnv();

  let result: ImagesResult;
  if (options.async) {
    const submitted = await client.images.generate({ ...body, mode: 'async' });
    const wait = options.wait === true || target !== undefined;
    if (json && !wait) return printJson(submitted);
    // Without a wait, the job id alone on stdout (for `id=$(…)`), the words on stderr.
    (wait ? say : stderr)(`submitted ${submitted.id} (${submitted.status}); poll ${submitted.polling_url}`);
    if (!wait) {
      stderr(`wait for it: kiln jobs wait ${submitted.id}`);
      stdout(submitted.id);
      return;
    }
    const job = await waitWithProgress(client, submitted.id, intervalMs);
    // The job as GET /v1/jobs/<id> answers it, id and status beside the result, as every wait
    // of the CLI prints it (kiln video … --wait, kiln jobs wait).
    if (json) printJson(job);
    if (job.status !== 'completed') return reportFailure(job);
    result = job.result as ImagesResult;
  } else {
    result = await client.images.generate(body);
    if (json) printJson(result);
  }

  if (!target) {
    if (json) return;
    // One line per image: its URL, or its base64 (--b64), for the next command in the pipe.
    for (const image of result.data) stdout('url' in image ? image.url : image.b64_json);
    return;
  }
  for (const [index, image] of result.data.entries()) {
    const to = await destination(target, `image-${result.created}.png`, index, force);
    if ('url' in image) {
      say(await download(client, image.url, to, `the image is still there: ${image.url}`));
    } else {
      const bytes = Buffer.from(image.b64_json, 'base64');
      await writeFile(to.file, bytes);
      say(`saved ${to.file} (${formatBytes(bytes.length)})`);
    }
  }
}

/** Options every video command takes. */
function videoOptions(command: Command): Command {
  return command
    .option('--prompt <text>', 'what should happen (up to 2000 characters)')
    .option('--negative-prompt <text>', 'what should not')
    .option('--model <name>', 'wan-2.2, ltx-video or ltx-2.3 (default ltx-video)')
    .option('--size <WxH>', 'e.g. 1280x720, 832x480, 512x512 (snapped down to multiples of 32)')
    .option('--duration <s>', 'length in seconds, 1–15 (default 4)')
    .option('--seed <n>', 'a seed, 0–4294967295, for a repeatable render')
    .option('--wait', 'wait for the video, with a progress bar, and print where it is')
    .option('--out <file>', 'save the video to this file (or directory); implies --wait')
    .option('--force', 'replace the --out file if it exists')
    .option('--json', 'print the submission (or, with --wait, the finished job) as JSON')
    .option('--interval <ms>', 'time between polls while waiting', '500');
}

function videoFields(options: VideoOptions): Omit<VideoGenerationRequest, 'prompt'> & { prompt?: string } {
  const duration = integer('--duration', options.duration, 1, 15);
  const seed = integer('--seed', options.seed, 0, 4294967295);
  return {
    ...(options.prompt === undefined ? {} : { prompt: options.prompt }),
    ...(options.negativePrompt === undefined ? {} : { negative_prompt: options.negativePrompt }),
    ...(options.model === undefined
      ? {}
      : { model: options.model as NonNullable<VideoGenerationRequest['model']> }),
    ...(options.size === undefined
      ? {}
      : { size: options.size as NonNullable<VideoGenerationRequest['size']> }),
    ...(duration === undefined ? {} : { duration_seconds: duration }),
    ...(seed === undefined ? {} : { seed }),
  };
}

export function mediaCommands(program: Command): void {
  const video = program
    .command('video')
    .description('render videos on the ComfyUI runners (uses KILN_BASE_URL and KILN_API_KEY)');

  videoOptions(
    video
      .command('transition')
      .description(
        'a video from a start image (to an end image): submits a job, and with --wait or --out follows it',
      )
      .requiredOption(
        '--start <file|https-url>',
        'the first frame: a PNG, JPEG or WebP file, or an https:// URL',
      )
      .option('--end <file|https-url>', 'the last frame, likewise'),
  ).action(async (options: VideoOptions) => {
    const fields = videoFields(options);
    const start = await imageRef('--start', options.start as string);
    const end = options.end === undefined ? undefined : await imageRef('--end', options.end);
    const body: TransitionRequest = { ...fields, start_image: start, ...(end ? { end_image: end } : {}) };
    await runVideo(options, (client) => client.videos.transition(body));
  });

  videoOptions(
    video
      .command('generate')
      .description(
        'a video from a prompt (and an image to animate): submits a job, and with --wait or --out follows it',
      )
      .option(
        '--image <file|https-url>',
        'an image to animate: a PNG, JPEG or WebP file, or an https:// URL',
      ),
  ).action(async (options: VideoOptions) => {
    if (!options.prompt) throw new UsageError('say what to render: --prompt <text>');
    const fields = videoFields(options);
    const image = options.image === undefined ? undefined : await imageRef('--image', options.image);
    const body: VideoGenerationRequest = {
      ...fields,
      prompt: options.prompt,
      ...(image ? { image } : {}),
    };
    await runVideo(options, (client) => client.videos.generate(body));
  });

  const images = program
    .command('images')
    .description('generate images on the ComfyUI runners (uses KILN_BASE_URL and KILN_API_KEY)');
  images
    .command('generate')
    .description('generate images and print their URLs, or save them with --out')
    .option('--prompt <text>', 'what to draw')
    .option('--negative-prompt <text>', 'what not to draw')
    .option('--n <n>', 'how many images, 1–4 (default 1)')
    .option('--size <WxH>', 'e.g. 1024x1024, 1216x832, 512x512 (default 1024x1024)')
    .option('--model <name>', 'the image model (default sdxl)')
    .option('--seed <n>', 'a seed, 0–4294967295, for repeatable images')
    .option('--b64', 'have the images sent inline as base64 rather than as URLs')
    .option('--async', 'submit a job and print its id instead of waiting')
    .option('--wait', 'with --async: follow the job with a progress bar')
    .option('--out <file|dir>', 'save the images: file.png, file-2.png … (or into a directory)')
    .option('--force', 'replace the --out files if they exist')
    .option('--json', 'print the API answer (with --async and --wait or --out, the finished job) as JSON')
    .option('--interval <ms>', 'time between polls while waiting', '500')
    .action((options: ImageOptions) => runImages(options));
}
