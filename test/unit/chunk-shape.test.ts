import { readFileSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ContentChunkShape } from '../../src/engines/openai/chunk-shape.js';
import type { ChatChunk } from '../../src/engines/types.js';
import { REPO_ROOT } from '../helpers/process.js';

/**
 * A content chunk shaped like one already parsed is read without JSON.parse. Whatever the text,
 * the reader must answer exactly what JSON.parse would, or nothing (and the caller parses it).
 */

const vllm = (content: string, id = 'chatcmpl-b1c2d3') =>
  JSON.stringify({
    id,
    object: 'chat.completion.chunk',
    created: 1717171717,
    model: 'Qwen/Qwen2.5-7B-Instruct',
    choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }],
  });
const llamacpp = (content: string) =>
  `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":${JSON.stringify(content)}}}],"created":1795446878,"id":"chatcmpl-tNVW2","model":"tiny","system_fingerprint":"b11669-Debian","object":"chat.completion.chunk"}`;

const learn = (text: string) => ContentChunkShape.learn(JSON.parse(text) as ChatChunk, text);

/** What the shape reads of `text`, checked to be what JSON.parse makes of it whenever it reads anything. */
function read(shape: ContentChunkShape, text: string): ChatChunk | undefined {
  const chunk = shape.read(text);
  if (chunk !== undefined) expect(chunk).toStrictEqual(JSON.parse(text));
  return chunk;
}

describe('ContentChunkShape', () => {
  it.each([
    ['vLLM', vllm],
    ['llama.cpp', llamacpp],
  ])('%s: later content chunks are read, with plain, escaped and non-ASCII content', (_name, make) => {
    const shape = learn(make(' Hello')) as ContentChunkShape;
    expect(shape).toBeDefined();
    for (const content of [
      ' w1',
      '',
      'wörld 🔥',
      'a "quoted" word',
      'back\\slash',
      'line\nbreak\ttab',
      '\u0001',
    ])
      expect(read(shape, make(content))?.choices[0]?.delta.content).toBe(content);
    // Escapes the engine chose itself, as JSON allows: the same string either way.
    expect(read(shape, make('x').replace('"x"', '"\\u00e9\\/"'))?.choices[0]?.delta.content).toBe('é/');
  });

  it('keeps the key order the engine wrote, as a re-serialised chunk shows', () => {
    const shape = learn(llamacpp('a')) as ContentChunkShape;
    expect(JSON.stringify(shape.read(llamacpp('b')))).toBe(llamacpp('b'));
  });

  it('leaves to the caller any chunk of another shape', () => {
    const shape = learn(vllm('a')) as ContentChunkShape;
    const others = [
      vllm('a', 'chatcmpl-other'),
      vllm('a').replace('"logprobs":null', '"logprobs":{"content":[]}'),
      vllm('a').replace('"finish_reason":null', '"finish_reason":"stop"'),
      vllm('a').replace('{"content":"a"}', '{"content":"a","role":"assistant"}'),
      // An unescaped quote makes the text another object, not another string.
      vllm('a').replace('"content":"a"', '"content":"a","role":"b"'),
      vllm('a').replace('"content":"a"', '"content":"a"x"'),
      vllm('a').slice(0, -1),
      '{"error":{"message":"boom"}}',
    ];
    for (const text of others) expect(shape.read(text)).toBeUndefined();
  });

  it('learns only a chunk whose content is its one varying string', () => {
    const role = '{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}';
    const tools = '{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}';
    const usage = '{"id":"c","choices":[],"usage":{"prompt_tokens":1}}';
    const nested = '{"id":"c","timings":{"n":1},"choices":[{"index":0,"delta":{"content":"a"}}]}';
    const twice = '{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"x":{"content":"b"}}';
    for (const text of [role, tools, usage, nested, twice]) expect(learn(text)).toBeUndefined();
  });

  it('learns no chunk that finishes its choice: nothing after it repeats it', () => {
    expect(learn(vllm('a').replace('"finish_reason":null', '"finish_reason":"length"'))).toBeUndefined();
  });

  it('reads the content alone as the object has it, and `like` is the chunk learnt from, kept apart', () => {
    const text = vllm('a');
    const parsed = JSON.parse(text) as ChatChunk;
    const shape = ContentChunkShape.learn(parsed, text) as ContentChunkShape;
    parsed.id = 'changed';
    expect(shape.like).toStrictEqual(JSON.parse(text));
    expect(shape.index).toBe(0);
    expect(shape.content(vllm('wörld "x"\n'))).toBe('wörld "x"\n');
    expect(shape.content(vllm('a', 'chatcmpl-other'))).toBeUndefined();
  });

  it('a chunk read is the reader’s own: changing it changes neither the shape nor later chunks', () => {
    const shape = learn(vllm('a')) as ContentChunkShape;
    const first = shape.read(vllm('b')) as ChatChunk;
    first.id = 'changed';
    (first.choices[0] as { index: number }).index = 7;
    expect(read(shape, vllm('c'))).toBeDefined();
  });

  it('property: for any content and any text, the reader answers what JSON.parse does, or nothing', () => {
    const shape = learn(vllm(' seed')) as ContentChunkShape;
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), (content) => {
        expect(read(shape, vllm(content))?.choices[0]?.delta.content).toBe(content);
      }),
    );
    // Arbitrary text between the shape's two halves: read only when the whole text parses the same.
    const before = vllm('').split('"content":"')[0] as string;
    const after = vllm('').split('"content":""')[1] as string;
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (body) => {
        const text = `${before}"content":"${body}"${after}`;
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        const chunk = shape.read(text);
        if (parsed === undefined) expect(chunk).toBeUndefined();
        else if (chunk !== undefined) expect(chunk).toStrictEqual(parsed);
      }),
    );
  });

  it.each([
    'chat-stream-no-usage.json',
    'chat-stream-include-usage.json',
    'chat-stream-with-role-chunk.json',
  ])('reads the content chunks of a real llama.cpp stream (recordings/llamacpp/%s)', (name) => {
    const recording = JSON.parse(
      readFileSync(path.join(REPO_ROOT, '..', 'shared', 'reference', 'recordings', 'llamacpp', name), 'utf8'),
    ) as { response: { sse_events: string[] } };
    const texts = recording.response.sse_events
      .filter((event) => event.startsWith('data: {'))
      .map((event) => event.slice('data: '.length));
    let shape: ContentChunkShape | undefined;
    let contentChunks = 0;
    let readHere = 0;
    for (const text of texts) {
      const delta = (JSON.parse(text) as ChatChunk).choices[0]?.delta;
      if (delta && Object.keys(delta).join() === 'content') contentChunks++;
      const chunk = shape ? read(shape, text) : undefined;
      if (chunk) readHere++;
      else shape = learn(text) ?? shape;
    }
    // Every content chunk but the first, which is learnt from.
    expect(contentChunks).toBeGreaterThan(2);
    expect(readHere).toBe(contentChunks - 1);
  });
});
