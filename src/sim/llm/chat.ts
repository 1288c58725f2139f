import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { LlmEngine, Sequence } from './engine.js';
import type { Fault } from './faults.js';
import { readJson, sendError, sendJson } from './http.js';
import {
  type Completion,
  checkContext,
  chunkBody,
  completionBody,
  isVllmError,
  modelNotFound,
  parseChatRequest,
  SSE_DONE,
  sse,
  usage,
  usageChunkBody,
  vllmError,
} from './protocol.js';
import { applyStop, countTokens, generateTokens, renderChatPrompt, type StoppedOutput } from './text.js';

export interface ChatSettings {
  model: string;
  contextWindow: number;
  maxTokensDefault: number;
}

/** An abort signal that fires when the client goes away before the answer is complete. */
function clientGone(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/** `POST /v1/chat/completions`, under the fault in force when the request arrived. */
export async function handleChat(
  req: IncomingMessage,
  res: ServerResponse,
  engine: LlmEngine,
  settings: ChatSettings,
  fault: Fault | undefined,
): Promise<void> {
  if (fault?.kind === 'hang') return; // accepted, never answered: the client has to time out
  if (fault?.kind === 'error') {
    const message = fault.message ?? `simulated engine failure (HTTP ${fault.status})`;
    return sendError(res, vllmError(fault.status, message));
  }
  const read = await readJson(req);
  if ('error' in read) return sendError(res, read.error);
  const request = parseChatRequest(read.body);
  if (isVllmError(request)) return sendError(res, request);
  if (request.model !== undefined && request.model !== settings.model) {
    return sendError(res, modelNotFound(request.model));
  }

  const prompt = renderChatPrompt(request.messages);
  const promptTokens = countTokens(prompt);
  const tooLong = checkContext(promptTokens, request.maxTokens, settings.contextWindow);
  if (tooLong) return sendError(res, tooLong);
  const maxTokens =
    request.maxTokens ?? Math.min(settings.maxTokensDefault, settings.contextWindow - promptTokens);
  // The answer depends on the model, the rendered prompt and the seed, nothing else.
  const key = `${settings.model}\u0000${prompt}\u0000${request.seed ?? ''}`;
  const output = applyStop(generateTokens(key, maxTokens), request.stop);

  const completion: Completion = {
    id: `chatcmpl-${randomUUID().replaceAll('-', '')}`,
    created: Math.floor(Date.now() / 1000),
    model: settings.model,
  };
  const dropAfter = fault?.kind === 'drop-mid-stream' ? fault.afterChunks : undefined;
  const sequence = { prompt, promptTokens, outputTokens: output.generated };
  const signal = clientGone(res);

  if (!request.stream) {
    const cached = await engine.run(sequence, signal);
    if (cached === undefined || dropAfter !== undefined) {
      res.destroy();
      return;
    }
    const u = usage(promptTokens, output.generated, cached);
    return sendJson(res, 200, completionBody(completion, output.tokens.join(''), output.finishReason, u));
  }
  await stream(res, engine, signal, {
    completion,
    sequence,
    output,
    includeUsage: request.includeUsage,
    dropAfter,
  });
}

interface StreamJob {
  completion: Completion;
  sequence: Sequence;
  output: StoppedOutput;
  includeUsage: boolean;
  /** The drop-mid-stream fault's event count, if in force. */
  dropAfter: number | undefined;
}

async function stream(
  res: ServerResponse,
  engine: LlmEngine,
  signal: AbortSignal,
  job: StreamJob,
): Promise<void> {
  const { completion, sequence, output, dropAfter } = job;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let events = 0;
  let cut = false;
  /** Writes the events in one go; false once the drop-mid-stream fault has cut the connection. */
  const send = (batch: string[]): boolean => {
    if (cut) return false;
    if (dropAfter !== undefined && events + batch.length > dropAfter) {
      const allowed = batch.slice(0, dropAfter - events).join('');
      events = dropAfter;
      cut = true;
      // Cut once the allowed events are out: destroying at once would drop them while the
      // response is still corked (Node flushes a response's writes on the next tick).
      if (allowed === '') res.destroy();
      else res.write(allowed, () => res.destroy());
      return false;
    }
    events += batch.length;
    if (batch.length > 0 && !res.destroyed) res.write(batch.join(''));
    return true;
  };
  if (dropAfter === 0) {
    res.destroy();
    return;
  }

  const cached = await engine.run(sequence, signal, (from, to) => {
    const batch: string[] = [];
    // vLLM's first event announces the role; the content follows as tokens are decoded.
    if (from === 0) batch.push(sse(chunkBody(completion, { role: 'assistant', content: '' }, null)));
    for (let i = from; i < to && i < output.tokens.length; i++) {
      const content = output.tokens[i] as string;
      if (content !== '') batch.push(sse(chunkBody(completion, { content }, null)));
    }
    send(batch);
  });
  if (cut) return; // the connection goes as soon as the allowed events are out
  if (cached === undefined || res.destroyed) {
    res.destroy();
    return;
  }
  const tail = [sse(chunkBody(completion, {}, output.finishReason))];
  if (job.includeUsage) {
    tail.push(sse(usageChunkBody(completion, usage(sequence.promptTokens, output.generated, cached))));
  }
  tail.push(SSE_DONE);
  if (send(tail)) res.end();
}
