import { describe, expect, it } from 'vitest';
import { ToolCallNumbering } from '../../src/engines/openai/tool-call-numbering.js';
import type { ChatChunk } from '../../src/engines/types.js';
import { ResponseEvents } from '../../src/responses/events.js';
import { argumentFragments, interleavedCallDeltas } from '../fixtures/tool-calls.js';

const chunk = (delta: Record<string, unknown>, finish: string | null = null): ChatChunk => ({
  id: 'up-1',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: [{ index: 0, delta, finish_reason: finish }],
});

describe('a streamed response’s events', () => {
  it('joins a message and two interleaved calls of many fragments exactly, in their events and in the output', () => {
    const events: Array<Record<string, unknown>> = [];
    const stream = new ResponseEvents(
      (text) => events.push(JSON.parse(text.slice(text.indexOf('data: ') + 6))),
      (type, index) => `${type === 'message' ? 'msg' : 'fc'}_${index}`,
    );
    stream.start({ id: 'resp_1', status: 'in_progress' });
    const words = Array.from({ length: 20 }, (_, i) => `word${i} `);
    for (const word of words) stream.chunk(chunk({ content: word }));
    const a = argumentFragments('a', 40);
    const b = argumentFragments('b', 40);
    for (const delta of interleavedCallDeltas(a, b)) stream.chunk(chunk(delta));
    stream.chunk(chunk({}, 'tool_calls'));
    const output = stream.close('completed');

    expect(stream.finishReason).toBe('tool_calls');
    expect(output).toEqual([
      expect.objectContaining({
        type: 'message',
        id: 'msg_0',
        content: [expect.objectContaining({ text: words.join('') })],
      }),
      expect.objectContaining({
        type: 'function_call',
        id: 'fc_1',
        call_id: 'call_a',
        arguments: a.join(''),
      }),
      expect.objectContaining({
        type: 'function_call',
        id: 'fc_2',
        call_id: 'call_b',
        arguments: b.join(''),
      }),
    ]);
    const done = events.filter((e) => e.type === 'response.function_call_arguments.done');
    expect(done).toEqual([
      expect.objectContaining({ item_id: 'fc_1', name: 'edit', arguments: a.join('') }),
      expect.objectContaining({ item_id: 'fc_2', name: 'edit', arguments: b.join('') }),
    ]);
    // Each call's deltas join to its arguments; the item added before them has none yet.
    for (const [id, parts] of [
      ['fc_1', a],
      ['fc_2', b],
    ] as const) {
      const deltas = events.filter(
        (e) => e.type === 'response.function_call_arguments.delta' && e.item_id === id,
      );
      expect(deltas.map((e) => e.delta).join('')).toBe(parts.join(''));
      const added = events.find(
        (e) => e.type === 'response.output_item.added' && (e.item as { id: string }).id === id,
      );
      expect(added).toMatchObject({ item: { arguments: '', status: 'in_progress' } });
    }
    expect(String(output[2]?.type === 'function_call' && output[2].arguments)).toContain('😃');
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  });

  it('parallel calls an engine numbered all 0, each with its own id (Ollama), are two items', () => {
    const events: Array<Record<string, unknown>> = [];
    const stream = new ResponseEvents(
      (text) => events.push(JSON.parse(text.slice(text.indexOf('data: ') + 6))),
      (type, index) => `${type === 'message' ? 'msg' : 'fc'}_${index}`,
    );
    stream.start({ id: 'resp_1', status: 'in_progress' });
    // The engine call numbers them 0, 1 before any caller sees them (ToolCallNumbering).
    const numbering = new ToolCallNumbering();
    for (const [id, path] of [
      ['call_a', 'hello.py'],
      ['call_b', 'world.py'],
    ] as const) {
      const called = chunk({
        tool_calls: [
          { index: 0, id, function: { name: 'file_write', arguments: JSON.stringify({ filePath: path }) } },
        ],
      });
      numbering.renumber(called);
      stream.chunk(called);
    }
    stream.chunk(chunk({}, 'tool_calls'));
    expect(stream.close('completed')).toEqual([
      expect.objectContaining({ id: 'fc_0', call_id: 'call_a', arguments: '{"filePath":"hello.py"}' }),
      expect.objectContaining({ id: 'fc_1', call_id: 'call_b', arguments: '{"filePath":"world.py"}' }),
    ]);
    expect(events.filter((e) => e.type === 'response.output_item.done').map((e) => e.output_index)).toEqual([
      0, 1,
    ]);
  });
});
