import { describe, expect, it } from 'vitest';
import { ToolCallNumbering } from '../../src/engines/openai/tool-call-numbering.js';
import type { ChatChunk } from '../../src/engines/types.js';
import { argumentFragments, interleavedCallDeltas } from '../fixtures/tool-calls.js';

const chunk = (choices: Array<{ index: number; calls: Array<Record<string, unknown>> }>): ChatChunk => ({
  id: 'up-1',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: choices.map(({ index, calls }) => ({ index, delta: { tool_calls: calls }, finish_reason: null })),
});

/** The indices the calls of each chunk carry once renumbered, and whether each chunk changed. */
function renumbered(chunks: ChatChunk[]): Array<{ changed: boolean; indices: number[][] }> {
  const numbering = new ToolCallNumbering();
  return chunks.map((c) => ({
    changed: numbering.renumber(c),
    indices: c.choices.map((choice) =>
      (choice.delta.tool_calls as Array<{ index: number }>).map((call) => call.index),
    ),
  }));
}

describe('numbering a stream’s tool calls', () => {
  it('leaves calls an engine numbered itself as they are, interleaved or not', () => {
    const deltas = interleavedCallDeltas(argumentFragments('a', 20), argumentFragments('b', 20));
    const chunks = deltas.map((delta) => chunk([{ index: 0, calls: delta.tool_calls as [] }]));
    const before = JSON.stringify(chunks);
    expect(renumbered(chunks).every((c) => !c.changed)).toBe(true);
    expect(JSON.stringify(chunks)).toBe(before);
    // An engine that repeats the id on every delta of a call (the same id again) is no new call.
    const repeated = [0, 1, 2].map(() =>
      chunk([{ index: 0, calls: [{ index: 0, id: 'call_a', function: { arguments: 'x' } }] }]),
    );
    expect(renumbered(repeated).map((c) => c.indices)).toEqual([[[0]], [[0]], [[0]]]);
  });

  it('numbers 0, 1, 2 the calls of a parallel set an engine numbered all 0, each with its own id', () => {
    // Ollama (ollama/ollama#15457): each call whole, each its own id, all index 0.
    const call = (id: string) => ({
      index: 0,
      id,
      type: 'function',
      function: { name: 'f', arguments: '{}' },
    });
    const result = renumbered([
      chunk([{ index: 0, calls: [call('call_a')] }]),
      chunk([{ index: 0, calls: [call('call_b')] }]),
      // A delta without an id goes on with the call its index reached last.
      chunk([{ index: 0, calls: [{ index: 0, function: { arguments: ' ' } }] }]),
      chunk([{ index: 0, calls: [call('call_c')] }]),
    ]);
    expect(result).toEqual([
      { changed: false, indices: [[0]] },
      { changed: true, indices: [[1]] },
      { changed: true, indices: [[1]] },
      { changed: true, indices: [[2]] },
    ]);
  });

  it('numbers each choice’s calls apart, and two calls at 0 in one chunk as two', () => {
    const result = renumbered([
      chunk([
        { index: 0, calls: [{ index: 0, id: 'a0' }] },
        { index: 1, calls: [{ index: 0, id: 'b0' }] },
      ]),
      chunk([
        {
          index: 1,
          calls: [
            { index: 0, id: 'b1' },
            { index: 0, id: 'b2' },
          ],
        },
      ]),
      chunk([{ index: 0, calls: [{ index: 0, id: 'a1' }] }]),
    ]);
    expect(result.map((c) => c.indices)).toEqual([[[0], [0]], [[1, 2]], [[1]]]);
  });

  it('passes over deltas that carry no index or no calls', () => {
    const numbering = new ToolCallNumbering();
    const odd = chunk([{ index: 0, calls: [{ id: 'x' }] }]);
    expect(numbering.renumber(odd)).toBe(false);
    const none: ChatChunk = {
      ...odd,
      choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }],
    };
    expect(numbering.renumber(none)).toBe(false);
  });
});
