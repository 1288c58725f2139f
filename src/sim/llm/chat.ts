import type { IncomingMessage, ServerResponse } from 'node:http';
import type { LlmEngine, Sequence } from './engine.js';
import type { Fault } from './faults.js';
import type { Flavor } from './flavor.js';
import { readJson, sendError, sendJson } from './http.js';
import { jsonTokens } from './json-output.js';
import {
  type ChatRequest,
  type ChoiceOutcome,
  type Completion,
  isSimError,
  type RunFigures,
  SSE_DONE,
  type StepToken,
  type StreamWriter,
  sse,
} from './protocol.js';
import { applyStop, countTokens, generateTokens, renderChatPrompt } from './text.js';
import {
  type CallPlan,
  type CallStep,
  decodeCall,
  firstSentenceLength,
  planToolCall,
  type ToolDialect,
} from './tools.js';

/** What a non-streaming request's engine does when its client goes away. */
export type NonStreamDisconnect = 'ignore' | 'cancel';

export interface ChatSettings {
  model: string;
  contextWindow: number;
  maxTokensDefault: number;
  prefillMsPerToken: number;
  decodeMsPerToken: number;
  nonStreamDisconnect: NonStreamDisconnect;
  /** No usage chunk in a stream, whatever `stream_options` asks. */
  ignoreStreamOptions: boolean;
  /** The model reads images (llama-server with its projector). */
  vision: boolean;
}

/** An abort signal that fires when the client goes away before the answer is complete. */
function clientGone(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/** A choice's tokens as decoded, and how it ends. */
interface Choice {
  /** The text of each token position (a position past a stop string sends nothing). */
  tokens: string[];
  /** For a tool call, what each token position adds to it. */
  steps?: CallStep[];
  outcome: ChoiceOutcome;
}

/**
 * A text answer: `budget` tokens drawn from `key`, ended by a stop string, and — answering a
 * tool's result — by the end of the model's first sentence (its end-of-turn token: "stop").
 */
function textChoice(key: string, index: number, budget: number, request: ChatRequest): Choice {
  if (request.format) {
    // JSON held to the format, whole within the budget, else cut short at it.
    const json = jsonTokens(request.format, key);
    const tokens = json.slice(0, budget);
    return {
      tokens,
      outcome: {
        index,
        text: tokens.join(''),
        finishReason: json.length <= budget ? 'stop' : 'length',
        stopString: undefined,
        completionTokens: tokens.length,
      },
    };
  }
  const drawn = generateTokens(key, budget);
  const ended = request.messages.at(-1)?.role === 'tool' ? firstSentenceLength(drawn) : undefined;
  const output = applyStop(ended === undefined ? drawn : drawn.slice(0, ended), request.stop);
  const finishReason = ended !== undefined && output.stopString === undefined ? 'stop' : output.finishReason;
  return {
    tokens: output.tokens,
    outcome: {
      index,
      text: output.tokens.join(''),
      finishReason,
      stopString: output.stopString,
      completionTokens: output.generated,
    },
  };
}

/** A tool call in place of text (stop strings do not apply to it). */
function callChoice(plan: CallPlan, dialect: ToolDialect, index: number, budget: number): Choice {
  const { steps, call, finishReason } = decodeCall(plan, dialect, budget);
  return {
    tokens: steps.map(() => ''),
    steps,
    outcome: {
      index,
      text: '',
      finishReason,
      stopString: undefined,
      completionTokens: steps.length,
      ...(call ? { toolCall: call } : {}),
    },
  };
}

/** `POST /v1/chat/completions`, under the fault in force when the request arrived. */
export async function handleChat(
  req: IncomingMessage,
  res: ServerResponse,
  engine: LlmEngine,
  settings: ChatSettings,
  flavor: Flavor,
  fault: Fault | undefined,
): Promise<void> {
  if (fault?.kind === 'hang') return; // accepted, never answered: the client has to time out
  if (fault?.kind === 'error') {
    const message = fault.message ?? `simulated engine failure (HTTP ${fault.status})`;
    return sendError(res, flavor, flavor.error(fault.status, message));
  }
  const read = await readJson(req, flavor);
  if ('error' in read) return sendError(res, flavor, read.error);
  const request = flavor.parseChat(read.body, settings);
  if (isSimError(request)) return sendError(res, flavor, request);
  if (settings.ignoreStreamOptions) request.includeUsage = false;
  const unknownModel = flavor.checkModel(request.model, settings.model);
  if (unknownModel) return sendError(res, flavor, unknownModel);

  const prompt = renderChatPrompt(request.messages);
  const promptTokens = countTokens(prompt);
  const budget = flavor.budget(promptTokens, request, settings);
  if (typeof budget !== 'number') return sendError(res, flavor, budget);
  // The answer depends on the model, the rendered prompt, the seed and the choice, nothing else;
  // choice 0 is the answer the same request with n = 1 gets.
  const key = `${settings.model}\u0000${prompt}\u0000${request.seed ?? ''}`;
  const plan = planToolCall(request.messages, { tools: request.tools, choice: request.toolChoice });
  const choices: Choice[] = Array.from({ length: request.n }, (_, index) =>
    plan
      ? callChoice(plan, flavor.tools, index, budget)
      : textChoice(index === 0 ? key : `${key}\u0000${index}`, index, budget, request),
  );

  const completion: Completion = {
    id: flavor.completionId(),
    created: Math.floor(Date.now() / 1000),
    model: settings.model,
  };
  const sequence: Sequence = {
    prompt,
    promptTokens,
    outputTokens: choices.map((c) => c.outcome.completionTokens),
    stream: request.stream,
    ...(request.cacheSalt === undefined ? {} : { cacheSalt: request.cacheSalt }),
  };
  const figures = (cachedTokens: number): RunFigures => ({
    promptTokens,
    cachedTokens,
    prefillMs: (promptTokens - cachedTokens) * settings.prefillMsPerToken,
    decodeMsPerToken: settings.decodeMsPerToken,
  });
  const dropAfter = fault?.kind === 'drop-mid-stream' ? fault.afterChunks : undefined;

  if (!request.stream) {
    // Real engines (llama.cpp, recorded) do not notice that a non-streaming client has gone: the
    // request runs to its end, and only then finds nobody to answer.
    const signal = settings.nonStreamDisconnect === 'cancel' ? clientGone(res) : new AbortController().signal;
    const cached = await engine.run(sequence, signal);
    if (cached === undefined || dropAfter !== undefined) {
      res.destroy();
      return;
    }
    if (res.destroyed) return;
    const outcomes = choices.map((c) => c.outcome);
    return sendJson(res, flavor, 200, flavor.completionBody(completion, outcomes, figures(cached)));
  }
  const writer = flavor.streamWriter(completion, request);
  await stream(res, engine, clientGone(res), { flavor, sequence, choices, writer, figures, dropAfter });
}

interface StreamJob {
  flavor: Flavor;
  sequence: Sequence;
  choices: Choice[];
  writer: StreamWriter;
  figures(cachedTokens: number): RunFigures;
  /** The drop-mid-stream fault's event count, if in force. */
  dropAfter: number | undefined;
}

/** The tokens of positions [from, to), position by position, each choice in index order. */
function stepTokens(choices: readonly Choice[], from: number, to: number): StepToken[] {
  const tokens: StepToken[] = [];
  for (let i = from; i < to; i++) {
    for (const { tokens: texts, steps, outcome } of choices) {
      if (i >= outcome.completionTokens) continue;
      const last = i === outcome.completionTokens - 1 ? outcome : undefined;
      const call = steps?.[i];
      tokens.push({
        index: outcome.index,
        text: texts[i] ?? '',
        first: i === 0,
        last,
        ...(call ? { call } : {}),
      });
    }
  }
  return tokens;
}

async function stream(res: ServerResponse, engine: LlmEngine, signal: AbortSignal, job: StreamJob) {
  const { flavor, sequence, choices, writer, dropAfter } = job;
  res.writeHead(200, { ...flavor.headers, ...flavor.sseHeaders });
  res.flushHeaders();
  let events = 0;
  let cut = false;
  // The drop-mid-stream fault cuts the connection once every allowed event is out: destroying at
  // once would drop writes still corked (Node flushes a response's writes on the next tick), and a
  // decode that runs late writes several steps in one tick.
  let unwritten = 0;
  const written = () => {
    if (--unwritten === 0 && cut) res.destroy();
  };
  const write = (text: string) => {
    unwritten++;
    res.write(text, written);
  };
  /** Writes the events in one go; false once the drop-mid-stream fault has cut the connection. */
  const send = (batch: string[]): boolean => {
    if (cut) return false;
    if (dropAfter !== undefined && events + batch.length > dropAfter) {
      const allowed = batch.slice(0, dropAfter - events).join('');
      events = dropAfter;
      cut = true;
      if (allowed !== '' && !res.destroyed) write(allowed);
      if (unwritten === 0) res.destroy();
      return false;
    }
    events += batch.length;
    if (batch.length > 0 && !res.destroyed) write(batch.join(''));
    return true;
  };
  if (dropAfter === 0) {
    res.destroy();
    return;
  }

  const cached = await engine.run(sequence, signal, (from, to, cachedTokens) => {
    send(writer.step(stepTokens(choices, from, to), job.figures(cachedTokens)).map(sse));
  });
  if (cut) return; // the connection goes as soon as the allowed events are out
  if (cached === undefined || res.destroyed) {
    res.destroy();
    return;
  }
  const outcomes = choices.map((c) => c.outcome);
  const tail = [...writer.close(outcomes, job.figures(cached)).map(sse), SSE_DONE];
  if (send(tail)) res.end();
}
