import { describe, expect, it } from 'vitest';
import { CompletionAssembler } from '../../src/engines/openai/assemble.js';
import { ToolCallNumbering } from '../../src/engines/openai/tool-call-numbering.js';
import type { ChatChunk } from '../../src/engines/types.js';
import { argumentFragments, interleavedCallDeltas } from '../fixtures/tool-calls.js';

const chunk = (delta: Record<string, unknown>, extra: Partial<ChatChunk> = {}): ChatChunk => ({
  id: 'up-1',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: [{ index: 0, delta, finish_reason: null }],
  ...extra,
});

describe('folding a stream into a completion', () => {
  it('joins content, keeps the finish reason and the usage of the last chunk', () => {
    const folded = new CompletionAssembler();
    folded.add(chunk({ role: 'assistant', content: '' }));
    folded.add(chunk({ content: 'Hello' }));
    folded.add(chunk({ content: ', world' }));
    folded.add({ ...chunk({}), choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
    folded.add({
      ...chunk({}),
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
    expect(folded.result()).toEqual({
      id: 'up-1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [
        {
          index: 0,
          // `refusal` null, as OpenAI's message always carries it (vLLM's non-stream answer too).
          message: { role: 'assistant', content: 'Hello, world', refusal: null },
          finish_reason: 'stop',
          logprobs: null,
        },
      ],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
  });

  it('assembles tool calls from their argument fragments', () => {
    const folded = new CompletionAssembler();
    folded.add(
      chunk({
        role: 'assistant',
        tool_calls: [
          { index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"ci' } },
        ],
      }),
    );
    folded.add(chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty":"Oslo"}' } }] }));
    folded.add({ ...chunk({}), choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
    const [choice] = folded.result().choices;
    expect(choice?.finish_reason).toBe('tool_calls');
    expect(choice?.message.tool_calls).toEqual([
      { type: 'function', id: 'call_1', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
    ]);
  });

  it('parallel calls an engine numbered all 0, each whole with its own id (Ollama), are two calls', () => {
    // As Ollama streams them (ollama/ollama#15457): each call complete in one delta, both index 0.
    // The engine call renumbers them before they are folded.
    const folded = new CompletionAssembler();
    const numbering = new ToolCallNumbering();
    const add = (c: ChatChunk) => {
      numbering.renumber(c);
      folded.add(c);
    };
    add(chunk({ role: 'assistant', content: '' }));
    for (const [id, path] of [
      ['call_a', 'hello.py'],
      ['call_b', 'world.py'],
    ] as const) {
      add(
        chunk({
          tool_calls: [
            {
              index: 0,
              id,
              type: 'function',
              function: { name: 'file_write', arguments: JSON.stringify({ filePath: path }) },
            },
          ],
        }),
      );
    }
    add({ ...chunk({}), choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
    expect(folded.result().choices[0]?.message.tool_calls).toEqual([
      {
        type: 'function',
        id: 'call_a',
        function: { name: 'file_write', arguments: '{"filePath":"hello.py"}' },
      },
      {
        type: 'function',
        id: 'call_b',
        function: { name: 'file_write', arguments: '{"filePath":"world.py"}' },
      },
    ]);
  });

  it('joins long arguments of interleaved tool calls exactly, each call keeping its fields in order', () => {
    // A code edit streamed as arguments: 50 fragments a call, two calls interleaved, a surrogate pair
    // split across fragments and another across the 16th fragment (where a join happens).
    const a = argumentFragments('a', 50);
    const b = argumentFragments('b', 50);
    const folded = new CompletionAssembler();
    const [opening, ...rest] = interleavedCallDeltas(a, b);
    folded.add(chunk({ role: 'assistant', ...opening }));
    for (const delta of rest) folded.add(chunk(delta));
    const calls = folded.result().choices[0]?.message.tool_calls as Array<Record<string, unknown>>;
    expect(calls).toEqual([
      { type: 'function', id: 'call_a', function: { name: 'edit', arguments: a.join('') } },
      { type: 'function', id: 'call_b', function: { name: 'edit', arguments: b.join('') } },
    ]);
    expect(JSON.stringify(calls[0])).toBe(
      JSON.stringify({ type: 'function', function: { name: 'edit', arguments: a.join('') }, id: 'call_a' }),
    );
    expect(b.join('')).toContain('😃');
  });

  it('gives back any text exactly, however it was split and however long it grows', () => {
    // A surrogate pair split across two chunks, a lone surrogate, a long piece, and enough pieces to be
    // joined in batches of 16 on the way: after the role chunk's '' and the first seven pieces, the
    // second pair is split across the first batch's end.
    const words = Array.from({ length: 40 }, (_, i) => ` w${i}`);
    words[7] = ' \ud83d';
    words[8] = '\ude03';
    const pieces = [
      'Grüße, ',
      '世界',
      ' \ud83d',
      '\ude00',
      ' "quoted"\n',
      'x'.repeat(1000),
      '\ud800 lone',
      ...words,
    ];
    const folded = new CompletionAssembler();
    folded.add(chunk({ role: 'assistant', content: '' }));
    // Parsed chunks and content-only ones (a ContentChunkShape's) fold into the same text.
    pieces.forEach((piece, i) => {
      if (i % 2 === 0) folded.add(chunk({ content: piece }));
      else folded.addContent(0, piece);
    });
    const content = folded.result().choices[0]?.message.content;
    expect(content).toBe(pieces.join(''));
    expect(content).toContain('😀');
    expect(content).toContain('😃');
  });

  it('answers empty content for a choice whose chunks carried only an empty string, null for tool calls alone', () => {
    const empty = new CompletionAssembler();
    empty.add(chunk({ role: 'assistant', content: '' }));
    expect(empty.result().choices[0]?.message.content).toBe('');
    const tools = new CompletionAssembler();
    tools.add(
      chunk({
        role: 'assistant',
        tool_calls: [{ index: 0, id: 'c', function: { name: 'f', arguments: '{}' } }],
      }),
    );
    expect(tools.result().choices[0]?.message.content).toBeNull();
    // vLLM opens with an empty content, then streams the calls: still no text, so null.
    const opened = new CompletionAssembler();
    opened.add(chunk({ role: 'assistant', content: '' }));
    opened.add(chunk({ tool_calls: [{ index: 0, id: 'c', function: { name: 'f', arguments: '{}' } }] }));
    expect(opened.result().choices[0]?.message.content).toBeNull();
  });

  it('joins reasoning text and refusals as it joins content, each field where the engine first sent it', () => {
    const folded = new CompletionAssembler();
    folded.add(chunk({ role: 'assistant', content: '' }));
    const thoughts = Array.from({ length: 20 }, (_, i) => `step ${i}. `);
    for (const thought of thoughts) folded.add(chunk({ reasoning_content: thought }));
    folded.add(chunk({ content: 'The answer' }));
    folded.add(chunk({ refusal: 'I will not ' }));
    folded.addContent(0, ' is 42.');
    folded.add(chunk({ refusal: 'say more.', reasoning_content: null }));
    const message = folded.result().choices[0]?.message as Record<string, unknown>;
    expect(message).toEqual({
      role: 'assistant',
      content: 'The answer is 42.',
      reasoning_content: thoughts.join(''),
      refusal: 'I will not say more.',
    });
    // `refusal` in OpenAI's place, after `content`; other fields where the engine first sent them.
    expect(Object.keys(message)).toEqual(['role', 'content', 'refusal', 'reasoning_content']);
  });

  it('a choice that only refused has null content, and logprobs keep both of OpenAI’s keys', () => {
    const folded = new CompletionAssembler();
    folded.add(chunk({ role: 'assistant', content: '' }));
    folded.add({
      ...chunk({ refusal: 'I cannot help with that.' }),
      choices: [
        {
          index: 0,
          delta: { refusal: 'I cannot help with that.' },
          finish_reason: null,
          logprobs: {
            content: null,
            refusal: [{ token: 'I', logprob: -0.1, bytes: [73], top_logprobs: [] }],
          },
        },
      ],
    });
    const refused = folded.result().choices[0];
    expect(refused?.message).toEqual({
      role: 'assistant',
      content: null,
      refusal: 'I cannot help with that.',
    });
    expect(refused?.logprobs).toEqual({
      content: [],
      refusal: [{ token: 'I', logprob: -0.1, bytes: [73], top_logprobs: [] }],
    });
    const answered = new CompletionAssembler();
    answered.add({
      ...chunk({}),
      choices: [
        {
          index: 0,
          delta: { content: 'Hi' },
          finish_reason: null,
          logprobs: { content: [{ token: 'Hi', logprob: -0.2, bytes: [72, 105], top_logprobs: [] }] },
        },
      ],
    });
    expect(answered.result().choices[0]?.logprobs).toEqual({
      content: [{ token: 'Hi', logprob: -0.2, bytes: [72, 105], top_logprobs: [] }],
      refusal: null,
    });
  });
});
