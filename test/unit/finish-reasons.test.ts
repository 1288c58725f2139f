import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { ChatStreamCall } from '../../src/engines/openai/call.js';
import { FinishReasons } from '../../src/engines/openai/finish-reasons.js';
import type { ChatChunk, ChatCompletion, EngineError, ReplicaTarget } from '../../src/engines/types.js';

const UP = { id: 'up-1', object: 'chat.completion.chunk', created: 7, model: 'm' } as const;
const chunk = (
  choices: Array<{ index: number; delta: Record<string, unknown>; finish_reason?: string | null }>,
  extra: Partial<ChatChunk> = {},
): ChatChunk => ({
  ...UP,
  choices: choices.map((c) => ({ logprobs: null, finish_reason: null, ...c })),
  ...extra,
});
const USAGE = { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 };
const CALL = { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } };

describe('the finish reasons a stream owes its choices', () => {
  it('owes none for a choice the engine finished, and keeps the reason it sent', () => {
    const finishes = new FinishReasons();
    finishes.note(chunk([{ index: 0, delta: { role: 'assistant', content: 'Hi' } }]));
    expect(finishes.owed).toBe(true);
    finishes.note(chunk([{ index: 0, delta: {}, finish_reason: 'length' }]));
    // A later chunk of that choice without one does not make it owed again.
    finishes.note(chunk([{ index: 0, delta: {} }]));
    expect(finishes.owed).toBe(false);
    expect(finishes.closing()).toEqual([]);
  });

  it('finishes each unfinished choice once, in index order: tool_calls where it made calls', () => {
    const finishes = new FinishReasons();
    finishes.note(chunk([{ index: 2, delta: { content: 'c' } }]));
    finishes.note(chunk([{ index: 1, delta: { content: 'b' } }]));
    finishes.note(chunk([{ index: 0, delta: { content: 'a', tool_calls: [] } }]));
    finishes.note(chunk([{ index: 1, delta: { tool_calls: [CALL] } }]));
    finishes.note(chunk([{ index: 2, delta: {}, finish_reason: 'length' }]));
    // A usage chunk has no choice to finish.
    finishes.note(chunk([], { usage: USAGE }));
    const closing = (index: number, finish_reason: string) => ({
      ...UP,
      choices: [{ index, delta: {}, logprobs: null, finish_reason }],
    });
    // An empty `tool_calls` (as some engines put on every content delta) is no call.
    expect(finishes.closing()).toEqual([closing(0, 'stop'), closing(1, 'tool_calls')]);
    expect(finishes.owed).toBe(false);
    expect(finishes.closing()).toEqual([]);
  });

  it('owes nothing for a stream with no choice in it', () => {
    const finishes = new FinishReasons();
    finishes.note(chunk([], { usage: USAGE }));
    expect(finishes.owed).toBe(false);
    expect(finishes.closing()).toEqual([]);
  });
});

const REPLICA: ReplicaTarget = {
  url: 'http://127.0.0.1:1',
  label: 'up replica 0',
  apiKey: undefined,
  timeoutMs: 1000,
  connectTimeoutMs: 1000,
  maxConcurrency: 1,
  healthPath: '/health',
};

/**
 * A ChatStreamCall fed `events` as the engine's body, whole (`ended`) or broken off: the chunks its
 * caller got and how it settled.
 */
function streamed(
  events: Array<ChatChunk | '[DONE]'>,
  { n = 1, ended = true }: { n?: number; ended?: boolean } = {},
): { chunks: ChatChunk[]; texts: string[]; completion?: ChatCompletion; error?: EngineError } {
  const out: ReturnType<typeof streamed> = { chunks: [], texts: [] };
  const controller = { abort: () => {} } as unknown as Dispatcher.DispatchController;
  const call = new ChatStreamCall(
    REPLICA,
    {
      body: { n },
      signal: new AbortController().signal,
      onChunk: (chunk, text) => {
        out.chunks.push(chunk);
        out.texts.push(text);
      },
    },
    (completion) => {
      out.completion = completion;
    },
    (error) => {
      out.error = error;
    },
  );
  call.onRequestStart(controller);
  call.onResponseStart(controller, 200, { 'content-type': 'text/event-stream' });
  for (const event of events) {
    const data = event === '[DONE]' ? event : JSON.stringify(event);
    call.onResponseData(controller, Buffer.from(`data: ${data}\n\n`));
  }
  if (ended) call.onResponseEnd();
  else
    call.onResponseError(
      controller,
      Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }),
    );
  return out;
}

const finishesOf = (chunks: ChatChunk[]) =>
  chunks.flatMap((c) => c.choices.map((choice) => [choice.index, choice.finish_reason]));

describe('a stream whose engine never sent a finish reason', () => {
  const content = [
    chunk([{ index: 0, delta: { role: 'assistant', content: '' } }]),
    chunk([{ index: 0, delta: { content: 'Hel' } }]),
    chunk([{ index: 0, delta: { content: 'lo' } }]),
  ];

  it('is finished with "stop" before its usage chunk, and so is the completion', () => {
    const { chunks, texts, completion, error } = streamed([
      ...content,
      chunk([], { usage: USAGE }),
      '[DONE]',
    ]);
    expect(error).toBeUndefined();
    // The engine's three chunks, then the closing one (its text is its JSON), then the usage.
    expect(chunks).toHaveLength(5);
    expect(chunks[3]).toEqual({
      ...UP,
      choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }],
    });
    expect(JSON.parse(texts[3] as string)).toEqual(chunks[3]);
    expect(chunks[4]).toMatchObject({ choices: [], usage: USAGE });
    expect(completion?.choices).toEqual([
      {
        index: 0,
        message: { role: 'assistant', content: 'Hello', refusal: null },
        finish_reason: 'stop',
        logprobs: null,
      },
    ]);
    // The closing chunk carries no tokens: the usage is the engine's.
    expect(completion?.usage).toEqual(USAGE);
  });

  it('is finished with "tool_calls" where the choice made calls', () => {
    const { chunks, completion } = streamed([
      chunk([{ index: 0, delta: { role: 'assistant', tool_calls: [CALL] } }]),
      '[DONE]',
    ]);
    expect(finishesOf(chunks)).toEqual([
      [0, null],
      [0, 'tool_calls'],
    ]);
    expect(completion?.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('with n > 1, finishes only the choices left unfinished, before the one usage chunk', () => {
    const { chunks, completion } = streamed(
      [
        chunk([{ index: 0, delta: { role: 'assistant', content: 'a' } }]),
        chunk([{ index: 1, delta: { role: 'assistant', content: 'b' } }]),
        chunk([{ index: 1, delta: {}, finish_reason: 'length' }]),
        chunk([], { usage: USAGE }),
        chunk([{ index: 2, delta: { role: 'assistant', content: 'c' } }]),
        chunk([], { usage: USAGE }),
        '[DONE]',
      ],
      { n: 3 },
    );
    expect(finishesOf(chunks)).toEqual([
      [0, null],
      [1, null],
      [1, 'length'],
      [2, null],
      [0, 'stop'],
      [2, 'stop'],
    ]);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 6 } });
    expect(completion?.choices.map((c) => c.finish_reason)).toEqual(['stop', 'length', 'stop']);
  });

  it('is left as the engine sent it when every choice was finished', () => {
    const finished = chunk([{ index: 0, delta: {}, finish_reason: 'length' }]);
    const { chunks, completion } = streamed([...content, finished, chunk([], { usage: USAGE }), '[DONE]']);
    expect(chunks).toHaveLength(5);
    expect(finishesOf(chunks).at(-1)).toEqual([0, 'length']);
    expect(completion?.choices[0]?.finish_reason).toBe('length');
  });

  it('gets no finish where the engine broke it off: before [DONE], or by a dropped connection', () => {
    for (const ended of [true, false]) {
      const { chunks, completion, error } = streamed([...content, chunk([], { usage: USAGE })], { ended });
      expect(completion).toBeUndefined();
      expect(error?.kind).toBe('broken');
      expect(finishesOf(chunks).filter(([, reason]) => reason !== null)).toEqual([]);
    }
  });

  it('relays a usage chunk that came early, before a chunk that follows it', () => {
    // Not the end, as it turned out: the usage chunk goes on before the next chunk, as it came.
    const { chunks } = streamed([
      content[0] as ChatChunk,
      chunk([], { usage: USAGE }),
      chunk([{ index: 0, delta: { content: 'more' } }]),
      '[DONE]',
    ]);
    expect(chunks.map((c) => (c.usage ? 'usage' : (c.choices[0]?.finish_reason ?? 'delta')))).toEqual([
      'delta',
      'usage',
      'delta',
      'stop',
    ]);
  });
});
