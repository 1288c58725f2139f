/**
 * The client side of bench/streams.ts: N streamed chat completions started together on as many
 * open keep-alive connections, each read timestamped as it arrives (events completed by one read
 * share its timestamp), every stream checked once the run is over — so that while it runs the client
 * does little more than split reads into events.
 */
import { Pool } from 'undici';
import { cpuMs, summarise } from '../lib.js';
import { trickleContent } from './pieces.js';

export interface StreamTarget {
  name: string;
  origin: string;
  headers: Record<string, string>;
  /** A cheap GET that answers 200: opens the connections before the measured run. */
  probePath: string;
  /** The process whose CPU time counts: the upstream's for direct, the gateway's otherwise. */
  pid: number | undefined;
}

export interface Workload {
  model: string;
  /** Content chunks per stream (what the upstream was started with). */
  chunks: number;
}

/** One measured run of `streams` concurrent streams on a target. */
export interface RunResult {
  target: string;
  streams: number;
  ttftP50: number;
  ttftP99: number;
  gapP50: number;
  gapP99: number;
  /** Data events received except `data: [DONE]`, over every stream. */
  chunks: number;
  /** CPU time of the target's process per received chunk, µs; undefined without /proc. */
  cpuPerChunkUs: number | undefined;
  /** This client's CPU time per received chunk, µs: what the load generator costs. */
  clientPerChunkUs: number;
  errors: Map<string, number>;
  seconds: number;
  /**
   * Where the worst gaps fell: the gaps at or above the p99, counted by the 100 ms of the run (from
   * the first request sent) in which each ended, as [ms, count] in time order. A pause of the relay
   * shows as most of them in one bin; a slow path, as a spread. A single run's only.
   */
  worstGaps?: Array<[number, number]>;
  /**
   * The gap p99 split at the moment the last stream's first content arrived: while streams were
   * still starting (what the starts cost the streams already running), and after. A single run's only.
   */
  gapP99Starting?: number;
  gapP99Started?: number;
}

export const errorCount = (r: RunResult) => [...r.errors.values()].reduce((a, b) => a + b, 0);

/** What one stream received: its events without their blank line, each with the time of its read. */
interface Received {
  sent: number;
  events: Buffer[];
  times: number[];
  error?: string;
}

const SEPARATOR = Buffer.from('\n\n');
const DONE = 'data: [DONE]';

/** Sends one stream and collects its events; never throws (a failure is the record's error). */
async function stream(pool: Pool, target: StreamTarget, w: Workload, tag: string): Promise<Received> {
  const body = JSON.stringify({
    model: w.model,
    messages: [{ role: 'user', content: `${tag}: tell me a story.` }],
    max_tokens: w.chunks,
    stream: true,
    stream_options: { include_usage: true },
  });
  const received: Received = { sent: performance.now(), events: [], times: [] };
  try {
    const response = await pool.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: target.headers,
      body,
    });
    if (response.statusCode !== 200) {
      const text = await response.body.text().catch(() => '');
      received.error = `status ${response.statusCode}: ${text.slice(0, 160)}`;
      return received;
    }
    let rest: Buffer | undefined;
    await new Promise<void>((resolve, reject) => {
      response.body.on('data', (read: Buffer) => {
        const now = performance.now();
        const data = rest ? Buffer.concat([rest, read]) : read;
        let start = 0;
        for (let end = data.indexOf(SEPARATOR); end !== -1; end = data.indexOf(SEPARATOR, start)) {
          received.events.push(data.subarray(start, end));
          received.times.push(now);
          start = end + SEPARATOR.length;
        }
        rest = start < data.length ? data.subarray(start) : undefined;
      });
      response.body.once('end', resolve);
      response.body.once('error', reject);
    });
    if (rest) received.error = 'the stream ends inside an event';
  } catch (error) {
    received.error = String((error as Error).message ?? error).slice(0, 160);
  }
  return received;
}

interface Chunk {
  object?: string;
  choices?: Array<{ delta?: { content?: string | null } }>;
  usage?: { completion_tokens?: number };
  error?: { message?: string };
}

/** Checks a stream and answers its content chunks' arrival times; throws what is wrong with it. */
function contentTimes(r: Received, expected: string): number[] {
  if (r.error) throw new Error(r.error);
  if (r.events.at(-1)?.toString() !== DONE) throw new Error('the stream does not end with data: [DONE]');
  const times: number[] = [];
  let content = '';
  let usage = false;
  for (let i = 0; i < r.events.length - 1; i++) {
    const text = (r.events[i] as Buffer).toString('utf8');
    if (!text.startsWith('data: ')) throw new Error(`not a data event: ${text.slice(0, 80)}`);
    const chunk = JSON.parse(text.slice(6)) as Chunk;
    if (chunk.error) throw new Error(`error event: ${chunk.error.message}`);
    if (chunk.object !== 'chat.completion.chunk')
      throw new Error(
        `chunk object is ${chunk.object} (the event starts ${JSON.stringify(text.slice(0, 12))})`,
      );
    const piece = chunk.choices?.map((c) => c.delta?.content ?? '').join('') ?? '';
    if (piece !== '') {
      content += piece;
      times.push(r.times[i] as number);
    }
    if (typeof chunk.usage?.completion_tokens === 'number') usage = true;
  }
  if (content !== expected)
    throw new Error(`content differs: ${content.length} characters, ${expected.length} expected`);
  if (!usage) throw new Error('no usage chunk though stream_options.include_usage was asked');
  return times;
}

/** Opens `streams` connections to the target (one per stream to come) with as many probes at once. */
async function connect(pool: Pool, target: StreamTarget, streams: number): Promise<void> {
  await Promise.all(
    Array.from({ length: streams }, async () => {
      const response = await pool.request({ method: 'GET', path: target.probePath });
      await response.body.dump();
    }),
  );
}

/** Called around a run's streams, after its connections are open (bench/streams/instructions.ts). */
export interface RunHooks {
  before(): Promise<void>;
  after(): Promise<void>;
}

/**
 * `streams` streams at once on a target, connections opened beforehand, each tagged uniquely (`tag`
 * plus its index) so no two prompts are alike; CPU time of the target's process over the run.
 */
export async function runStreams(
  target: StreamTarget,
  streams: number,
  w: Workload,
  tag: string,
  hooks?: RunHooks,
): Promise<RunResult> {
  const pool = new Pool(target.origin, {
    connections: streams,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    // Streams past a gateway's workers wait for one before their headers.
    headersTimeout: 120_000,
    bodyTimeout: 30_000,
  });
  let received: Received[];
  let cpu: number | undefined;
  let client: NodeJS.CpuUsage;
  let seconds: number;
  try {
    await connect(pool, target, streams);
    await hooks?.before();
    const cpuBefore = cpuMs(target.pid);
    const clientBefore = process.cpuUsage();
    const started = performance.now();
    received = await Promise.all(
      Array.from({ length: streams }, (_, i) => stream(pool, target, w, `${tag}-${i}`)),
    );
    seconds = (performance.now() - started) / 1000;
    client = process.cpuUsage(clientBefore);
    const cpuAfter = cpuMs(target.pid);
    await hooks?.after();
    if (cpuBefore !== undefined && cpuAfter !== undefined) cpu = cpuAfter - cpuBefore;
  } finally {
    await pool.close();
  }
  return analyse(
    target.name,
    received,
    w,
    { target: cpu, client: (client.user + client.system) / 1000 },
    seconds,
  );
}

function analyse(
  name: string,
  received: Received[],
  w: Workload,
  cpu: { target: number | undefined; client: number },
  seconds: number,
): RunResult {
  const expected = trickleContent(w.chunks);
  const ttft: number[] = [];
  const gaps: number[] = [];
  /** When each gap in `gaps` ended, in ms from the first request sent. */
  const gapEnds: number[] = [];
  const start = Math.min(...received.map((r) => r.sent));
  const errors = new Map<string, number>();
  let chunks = 0;
  /** When the last stream's first content arrived, in ms from the first request sent. */
  let lastFirst = 0;
  for (const r of received) {
    chunks += r.events.filter((e) => e.toString() !== DONE).length;
    try {
      const times = contentTimes(r, expected);
      ttft.push((times[0] as number) - r.sent);
      lastFirst = Math.max(lastFirst, (times[0] as number) - start);
      for (let i = 1; i < times.length; i++) {
        gaps.push((times[i] as number) - (times[i - 1] as number));
        gapEnds.push((times[i] as number) - start);
      }
    } catch (error) {
      const message = String((error as Error).message ?? error);
      errors.set(message, (errors.get(message) ?? 0) + 1);
    }
  }
  const none = { median: Number.NaN, p99: Number.NaN };
  const t = ttft.length > 0 ? summarise(ttft) : none;
  const g = gaps.length > 0 ? summarise(gaps) : none;
  const starting = gaps.filter((_, i) => (gapEnds[i] as number) <= lastFirst);
  const started = gaps.filter((_, i) => (gapEnds[i] as number) > lastFirst);
  const worst = new Map<number, number>();
  gaps.forEach((gap, i) => {
    if (gap < g.p99) return;
    const bin = Math.floor((gapEnds[i] as number) / 100) * 100;
    worst.set(bin, (worst.get(bin) ?? 0) + 1);
  });
  return {
    target: name,
    streams: received.length,
    ttftP50: t.median,
    ttftP99: t.p99,
    gapP50: g.median,
    gapP99: g.p99,
    chunks,
    cpuPerChunkUs: cpu.target !== undefined && chunks > 0 ? (cpu.target * 1000) / chunks : undefined,
    clientPerChunkUs: (cpu.client * 1000) / chunks,
    errors,
    seconds,
    worstGaps: [...worst].sort((a, b) => a[0] - b[0]),
    gapP99Starting: starting.length > 0 ? summarise(starting).p99 : Number.NaN,
    gapP99Started: started.length > 0 ? summarise(started).p99 : Number.NaN,
  };
}
