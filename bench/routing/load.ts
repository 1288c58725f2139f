/**
 * The load: streaming chat completions with a bounded number in flight (closed loop), each answer
 * checked, time to the first content chunk measured. Sessions' turns go one after another, each
 * carrying the answers that came back; requests alternate between the gateways.
 */
import { Pool } from 'undici';
import type { Message, Session } from './workloads.js';

export interface Gateway {
  url: string;
  key: string;
}

export interface LoadSettings {
  model: string;
  maxTokens: number;
  concurrency: number;
  /** No request is sent after this long; what is left counts as failures. */
  deadlineMs: number;
  /** One request's limit, from sending it to `data: [DONE]`. */
  requestTimeoutMs: number;
}

export interface LoadResult {
  ok: number;
  /** Failure message → count; requests never sent (a failed earlier turn, the deadline) included. */
  failures: Map<string, number>;
  /** Time to the first content chunk of each successful request, ms. */
  ttft: number[];
  seconds: number;
  /** Every prompt in the order it was submitted (for the oracle). */
  submitted: Message[][];
  /** Requests per replica index, from the `x-kiln-route` header. */
  perReplica: Map<number, number>;
  /** Every successful request: where it went and what its replica found cached. */
  records: RequestRecord[];
}

export interface RequestRecord {
  session: number;
  turn: number;
  gateway: number;
  replica: number | undefined;
  /** Cached prompt tokens the router predicted (`x-kiln-route`'s `cached=`). */
  predicted: number | undefined;
  /** `usage.prompt_tokens_details.cached_tokens` and `usage.prompt_tokens` as the answer reported them. */
  cached: number | undefined;
  promptTokens: number | undefined;
  /** When it was sent, ms after the run began, and the time to its first content chunk. */
  sentAt: number;
  ttft: number;
  /** Time to `data: [DONE]`, ms. */
  totalMs: number;
}

interface Turn {
  session: number;
  turn: number;
  messages: Message[];
}

/** Sends one streaming request; answers the content and the time to its first content chunk. */
async function streamOnce(
  pool: Pool,
  gateway: Gateway,
  s: LoadSettings,
  messages: Message[],
): Promise<{
  content: string;
  ttft: number;
  replica: number | undefined;
  predicted: number | undefined;
  cached: number | undefined;
  promptTokens: number | undefined;
}> {
  const t0 = performance.now();
  const response = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
    body: JSON.stringify({
      model: s.model,
      messages,
      max_tokens: s.maxTokens,
      stream: true,
      stream_options: { include_usage: true },
    }),
    headersTimeout: s.requestTimeoutMs,
    bodyTimeout: s.requestTimeoutMs,
    signal: AbortSignal.timeout(s.requestTimeoutMs),
  });
  if (response.statusCode !== 200) {
    const text = await response.body.text().catch(() => '');
    throw new Error(`status ${response.statusCode}: ${text.slice(0, 160)}`);
  }
  const route = String(response.headers['x-kiln-route'] ?? '');
  const replicaMatch = /replica=(\d+)/.exec(route);
  const predictedMatch = /cached=(\d+)/.exec(route);
  let cached: number | undefined;
  let promptTokens: number | undefined;
  let ttft = -1;
  let content = '';
  let done = false;
  let finish: unknown;
  let completionTokens: unknown;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const part of response.body as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(part, { stream: true });
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf('\n\n');
      if (!event.startsWith('data: ')) continue;
      const data = event.slice(6);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data) as {
        error?: { message?: string };
        choices?: Array<{ delta?: { content?: string }; finish_reason?: string | null }>;
        usage?: {
          completion_tokens?: number;
          prompt_tokens?: number;
          prompt_tokens_details?: { cached_tokens?: number };
        };
      };
      if (chunk.error) throw new Error(`stream error: ${chunk.error.message ?? JSON.stringify(chunk.error)}`);
      for (const choice of chunk.choices ?? []) {
        const text = choice.delta?.content ?? '';
        if (text !== '' && ttft < 0) ttft = performance.now() - t0;
        content += text;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      if (chunk.usage) {
        completionTokens = chunk.usage.completion_tokens;
        promptTokens = chunk.usage.prompt_tokens;
        cached = chunk.usage.prompt_tokens_details?.cached_tokens;
      }
    }
  }
  if (!done) throw new Error('stream ended without data: [DONE]');
  if (ttft < 0) throw new Error('no content in the answer');
  if (finish !== 'length') throw new Error(`finish_reason ${String(finish)}`);
  if (completionTokens !== s.maxTokens)
    throw new Error(`usage.completion_tokens ${String(completionTokens)}`);
  return {
    content,
    ttft,
    replica: replicaMatch ? Number(replicaMatch[1]) : undefined,
    predicted: predictedMatch ? Number(predictedMatch[1]) : undefined,
    cached,
    promptTokens,
  };
}

/**
 * Runs every session's turns through the gateways, `concurrency` requests in flight: the first turns
 * queue in session order; a session's next turn joins the end of the queue once its answer is in.
 */
export async function runLoad(
  sessions: readonly Session[],
  gateways: Gateway[],
  s: LoadSettings,
): Promise<LoadResult> {
  const pools = gateways.map(
    (g) => new Pool(g.url, { connections: s.concurrency, pipelining: 1, keepAliveTimeout: 60_000 }),
  );
  const result: LoadResult = {
    ok: 0,
    failures: new Map(),
    ttft: [],
    seconds: 0,
    submitted: [],
    perReplica: new Map(),
    records: [],
  };
  const fail = (message: string, count = 1) =>
    result.failures.set(message, (result.failures.get(message) ?? 0) + count);

  const ready: Turn[] = sessions.map((session, i) => ({
    session: i,
    turn: 0,
    messages: [
      { role: 'system', content: session.system },
      { role: 'user', content: session.users[0] as string },
    ],
  }));
  let inFlight = 0;
  let sent = 0;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const started = performance.now();
  const deadline = started + s.deadlineMs;

  const worker = async () => {
    for (;;) {
      const turn = ready.shift();
      if (!turn) {
        // Nothing ready: done when nothing is in flight either, else wait for an answer.
        if (inFlight === 0) return;
        await new Promise<void>((resolve) => {
          const previous = wake;
          wake = () => {
            previous?.();
            resolve();
          };
        });
        continue;
      }
      const session = sessions[turn.session] as Session;
      if (performance.now() > deadline) {
        fail('not sent: the run deadline passed', session.users.length - turn.turn);
        continue;
      }
      const g = sent++ % gateways.length;
      result.submitted.push(turn.messages);
      const sentAt = performance.now() - started;
      inFlight++;
      try {
        const answer = await streamOnce(pools[g] as Pool, gateways[g] as Gateway, s, turn.messages);
        result.ok++;
        result.ttft.push(answer.ttft);
        result.records.push({
          session: turn.session,
          turn: turn.turn,
          gateway: g,
          replica: answer.replica,
          predicted: answer.predicted,
          cached: answer.cached,
          promptTokens: answer.promptTokens,
          sentAt,
          ttft: answer.ttft,
          totalMs: performance.now() - started - sentAt,
        });
        if (answer.replica !== undefined) {
          result.perReplica.set(answer.replica, (result.perReplica.get(answer.replica) ?? 0) + 1);
        }
        const next = session.users[turn.turn + 1];
        if (next !== undefined) {
          ready.push({
            session: turn.session,
            turn: turn.turn + 1,
            messages: [
              ...turn.messages,
              { role: 'assistant', content: answer.content },
              { role: 'user', content: next },
            ],
          });
        }
      } catch (error) {
        fail(String((error as Error).message ?? error).slice(0, 200));
        const left = session.users.length - turn.turn - 1;
        if (left > 0) fail('not sent: an earlier turn of its conversation failed', left);
      } finally {
        inFlight--;
        notify();
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: s.concurrency }, worker));
  } finally {
    result.seconds = (performance.now() - started) / 1000;
    await Promise.all(pools.map((p) => p.close()));
  }
  return result;
}
