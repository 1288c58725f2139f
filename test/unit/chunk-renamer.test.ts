import { describe, expect, it } from 'vitest';
import { ChunkRelay, ChunkRenamer } from '../../src/chat/kind.js';
import { ContentChunkShape } from '../../src/engines/openai/chunk-shape.js';
import type { ChatChunk } from '../../src/engines/types.js';

/**
 * A streamed chunk reaches the caller with Kiln's id, model name and created time in place of the
 * engine's, and every other byte as the engine wrote it. Whatever the engine's JSON looks like,
 * the caller must parse exactly the engine's chunk with those three fields replaced.
 */

const KILN_ID = 'chatcmpl-01977c1e-7a2b-7c3d-8e4f-0123456789ab';
const KILN_MODEL = 'support';
const KILN_CREATED = 1750000000;
const renamed = { id: KILN_ID, model: KILN_MODEL, created: KILN_CREATED };

const renamer = () => new ChunkRenamer(KILN_ID, KILN_MODEL, KILN_CREATED);

/** The renamer's output for the engine's text, checked to parse as the engine's chunk renamed. */
function rename(text: string, using = renamer()): string {
  const chunk = JSON.parse(text) as ChatChunk;
  const out = using.text(chunk, text);
  expect(JSON.parse(out)).toEqual({ ...chunk, ...renamed });
  return out;
}

describe('ChunkRenamer', () => {
  it('vLLM order: swaps id, created and model in place, every other byte as the engine wrote it', () => {
    const vllm = (id: string, created: number, model: string) =>
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":"Hello, wörld 🔥"},"logprobs":null,"finish_reason":null}],"usage":null}`;
    const engine = vllm('chatcmpl-b1c2d3', 1717171717, 'Qwen/Qwen2.5-7B-Instruct');
    expect(rename(engine)).toBe(vllm(KILN_ID, KILN_CREATED, KILN_MODEL));
  });

  it('llama.cpp order with a tool call: the nested tool-call id stays, the chunk id is replaced', () => {
    const llamacpp = (id: string, created: number, model: string) =>
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_Xk3pQ9","type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":\\"Os"}}]}}],' +
      `"created":${created},"id":${JSON.stringify(id)},"model":${JSON.stringify(model)},"system_fingerprint":"b5120-3e0ba0e6","object":"chat.completion.chunk",` +
      '"timings":{"prompt_n":12,"prompt_ms":8.5,"predicted_n":3,"predicted_ms":21.25}}';
    const engine = llamacpp('chatcmpl-Zq8hXy2', 1717171717, 'qwen2.5-7b-instruct-q4_k_m.gguf');
    const out = rename(engine);
    expect(out).toBe(llamacpp(KILN_ID, KILN_CREATED, KILN_MODEL));
    expect(JSON.parse(out).choices[0].delta.tool_calls[0].id).toBe('call_Xk3pQ9');
  });

  it('a tool call whose id is the chunk’s own id, ahead of it in the text, keeps its value', () => {
    // Nested first (llama.cpp order), same value: only the chunk's own id may change.
    const text =
      '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-same","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}],' +
      '"created":1717171717,"id":"chatcmpl-same","model":"m","object":"chat.completion.chunk"}';
    const out = rename(text);
    expect(JSON.parse(out).choices[0].delta.tool_calls[0].id).toBe('chatcmpl-same');
  });

  it('content that spells out `"id":"chatcmpl-x"` stays as it was', () => {
    const content = 'the chunk said "id":"chatcmpl-x", "created":1717171717, "model":"m"} \\ done';
    const chunkText = (id: string, created: number, model: string) =>
      `{"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}],"created":${created},"id":${JSON.stringify(id)},"model":${JSON.stringify(model)},"object":"chat.completion.chunk"}`;
    const engine = chunkText('chatcmpl-x', 1717171717, 'm');
    const out = rename(engine);
    expect(out).toBe(chunkText(KILN_ID, KILN_CREATED, KILN_MODEL));
    expect(JSON.parse(out).choices[0].delta.content).toBe(content);
  });

  it('Python json.dumps spacing (`"id": "x"`) falls back to a whole new serialisation', () => {
    const python =
      '{"id": "chatcmpl-py", "object": "chat.completion.chunk", "created": 1717171717, "model": "m", "choices": [{"index": 0, "delta": {"content": "caf\\u00e9 \\"id\\": \\"chatcmpl-py\\""}, "finish_reason": null}]}';
    const out = rename(python);
    expect(JSON.parse(out).choices[0].delta.content).toBe('café "id": "chatcmpl-py"');
  });

  it('a chunk without `created` gets Kiln’s', () => {
    const text =
      '{"id":"chatcmpl-nc","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}';
    const out = rename(text);
    expect(JSON.parse(out).created).toBe(KILN_CREATED);
  });

  it('a chunk without `id` or `model` gets Kiln’s', () => {
    const out = rename(
      '{"object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}',
    );
    expect(JSON.parse(out)).toMatchObject(renamed);
  });

  it('an engine `created` that is the prefix of a longer number earlier in the text is not spliced into it', () => {
    // The first `"created":17…` in the text belongs to a nested object, and its number is longer.
    const text =
      '{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"x_meta":{"created":1717171717999},"created":1717171717,"id":"chatcmpl-p","model":"m","object":"chat.completion.chunk"}';
    const out = rename(text);
    expect(JSON.parse(out).x_meta).toEqual({ created: 1717171717999 });
  });

  it('an engine `created` followed by a longer number field keeps that field', () => {
    const shape = (id: string, created: number, model: string) =>
      `{"id":${JSON.stringify(id)},"created":${created},"model":${JSON.stringify(model)},"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":17,"completion_tokens":171,"total_tokens":188},"created_ns":17000}`;
    const engine = shape('chatcmpl-q', 17, 'm');
    expect(rename(engine)).toBe(shape(KILN_ID, KILN_CREATED, KILN_MODEL));
  });

  it('an engine writing `created` as a float or in exponent form is renamed all the same', () => {
    for (const written of ['1717171717.0', '1.717171717e9', '1717171717.5']) {
      const out = rename(
        `{"id":"chatcmpl-f","object":"chat.completion.chunk","created":${written},"model":"m","choices":[{"index":0,"delta":{"content":"y"},"finish_reason":null}]}`,
      );
      expect(JSON.parse(out).created, written).toBe(KILN_CREATED);
      expect(out, written).not.toContain(written);
    }
  });

  it('one renamer over a whole stream: every chunk renamed, also when the engine’s values change midway', () => {
    const using = renamer();
    const texts = [
      '{"id":"chatcmpl-a","object":"chat.completion.chunk","created":100,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
      '{"id":"chatcmpl-a","object":"chat.completion.chunk","created":100,"model":"m","choices":[{"index":0,"delta":{"content":"one"},"finish_reason":null}]}',
      // The same chunk written with spaces: a fallback between two splices.
      '{"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 100, "model": "m", "choices": [{"index": 0, "delta": {"content": "two"}, "finish_reason": null}]}',
      // An engine whose id and created move (a new second) mid-stream.
      '{"id":"chatcmpl-b","object":"chat.completion.chunk","created":101,"model":"m2","choices":[{"index":0,"delta":{"content":"three"},"finish_reason":null}]}',
      '{"id":"chatcmpl-a","object":"chat.completion.chunk","created":100,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
      '{"id":"chatcmpl-a","object":"chat.completion.chunk","created":100,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}',
    ];
    const outs = texts.map((text) => rename(text, using));
    expect(outs.map((o) => JSON.parse(o).choices[0]?.delta.content ?? null)).toEqual([
      '',
      'one',
      'two',
      'three',
      null,
      null,
    ]);
    expect(outs[3]).toBe(
      `{"id":"${KILN_ID}","object":"chat.completion.chunk","created":${KILN_CREATED},"model":"${KILN_MODEL}","choices":[{"index":0,"delta":{"content":"three"},"finish_reason":null}]}`,
    );
  });

  it('a renamer reused over a stream writes every chunk as a fresh renamer would', () => {
    const vllm = (content: string, extra = '') =>
      `{"id":"chatcmpl-v","object":"chat.completion.chunk","created":100,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]${extra}}`;
    const texts = [
      vllm(''),
      vllm('one'),
      vllm('"id":"chatcmpl-v" spelled out'),
      // The same opening, then a top-level field a fresh renamer does not touch.
      vllm('two', ',"system_fingerprint":"fp"'),
      // The same opening with the model changed after it: not the opening any more.
      '{"id":"chatcmpl-v","object":"chat.completion.chunk","created":100,"model":"m2","choices":[]}',
      '{"id":"chatcmpl-v","object":"chat.completion.chunk","created":100,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}',
    ];
    const using = renamer();
    for (const text of texts) expect(rename(text, using)).toBe(rename(text));
  });

  it('a Kiln model name with quotes and non-ASCII characters is written as valid JSON', () => {
    const odd = new ChunkRenamer(KILN_ID, 'pérsona "quoted" \\ name', KILN_CREATED);
    const text =
      '{"id":"chatcmpl-o","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"content":"z"},"finish_reason":null}]}';
    const chunk = JSON.parse(text) as ChatChunk;
    expect(JSON.parse(odd.text(chunk, text))).toEqual({
      ...chunk,
      id: KILN_ID,
      model: 'pérsona "quoted" \\ name',
      created: KILN_CREATED,
    });
  });

  it('serialise answers the chunk with Kiln’s fields', () => {
    const chunk = JSON.parse(
      '{"id":"chatcmpl-s","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"content":"z"},"finish_reason":null}],"timings":{"predicted_n":1}}',
    ) as ChatChunk;
    expect(JSON.parse(renamer().serialise(chunk))).toEqual({ ...chunk, ...renamed });
  });
});

describe('ChunkRelay, content chunks read by their shape', () => {
  /**
   * The first chunk is learnt as the shape, as the engine call does; each later one is relayed from
   * its content alone. Every relayed text must parse as that chunk renamed, its own content intact.
   */
  function relayed(texts: string[], odd = false): string[] {
    const sent: string[] = [];
    const model = odd ? 'pérsona "quoted" \\ name' : KILN_MODEL;
    const relay = new ChunkRelay(false, new ChunkRenamer(KILN_ID, model, KILN_CREATED), (t) => sent.push(t));
    const [first, ...rest] = texts as [string, ...string[]];
    const shape = ContentChunkShape.learn(JSON.parse(first) as ChatChunk, first) as ContentChunkShape;
    expect(shape).toBeDefined();
    // The engine opened its choice with the role, as most do (the relay adds one where none did).
    const opening = JSON.parse(first) as ChatChunk;
    (opening.choices[0] as { delta: unknown }).delta = { role: 'assistant' };
    relay.add(opening, JSON.stringify(opening));
    sent.length = 0;
    relay.add(JSON.parse(first) as ChatChunk, first);
    for (const text of rest) {
      const body = shape.body(text) as string;
      expect(body, text).toBeDefined();
      relay.content(shape, shape.decode(body) as string, body);
    }
    expect(sent.map((t) => JSON.parse(t))).toEqual(
      texts.map((text) => ({ ...JSON.parse(text), id: KILN_ID, model, created: KILN_CREATED })),
    );
    return sent;
  }

  const contents = ['Hello', ' wörld 🔥', 'a "quoted" word', 'line\nbreak', '"id":"chatcmpl-x",', ''];

  it('vLLM order: the engine’s bytes around each content, the three fields Kiln’s', () => {
    const vllm = (content: string, id = 'chatcmpl-b1', model = 'Qwen/Qwen2.5-7B-Instruct', created = 17) =>
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null}]}`;
    const sent = relayed(contents.map((c) => vllm(c)));
    expect(sent).toEqual(contents.map((c) => vllm(c, KILN_ID, KILN_MODEL, KILN_CREATED)));
    relayed(
      contents.map((c) => vllm(c)),
      true,
    );
  });

  it('llama.cpp order, fields after the choices', () => {
    const llamacpp = (content: string, id = 'chatcmpl-tN', model = 'tiny', created = 1795446878) =>
      `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":${JSON.stringify(content)}}}],"created":${created},"id":${JSON.stringify(id)},"model":${JSON.stringify(model)},"system_fingerprint":"b1","object":"chat.completion.chunk"}`;
    const sent = relayed(contents.map((c) => llamacpp(c)));
    expect(sent).toEqual(contents.map((c) => llamacpp(c, KILN_ID, KILN_MODEL, KILN_CREATED)));
  });

  it('the engine’s own escapes and spacing outside the three fields reach the caller as written', () => {
    // Bytes JSON.stringify would not write: a chunk serialised again would lose them.
    const engine = (body: string, id = 'chatcmpl-e', created = 9, model = 'm') =>
      `{"id":${JSON.stringify(id)},"object": "chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":"${body}"},"finish_reason":null}]}`;
    const bodies = ['first', 'caf\\u00e9 \\/ ok', '\\"quoted\\"', 'plain'];
    const sent = relayed(bodies.map((b) => engine(b)));
    expect(sent).toEqual(bodies.map((b) => engine(b, KILN_ID, KILN_CREATED, KILN_MODEL)));
  });

  it('a caller that asked for usage gets "usage":null at the end of each chunk the engine sent without it', () => {
    const vllm = (content: string, id = 'chatcmpl-u', model = 'm', created = 4) =>
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}`;
    const sent: string[] = [];
    const relay = new ChunkRelay(true, renamer(), (t) => sent.push(t));
    const first = vllm('one');
    const shape = ContentChunkShape.learn(JSON.parse(first) as ChatChunk, first) as ContentChunkShape;
    relay.add(JSON.parse(first) as ChatChunk, first);
    relay.content(shape, 'two }', shape.body(vllm('two }')) as string);
    // A chunk that carries its usage, null or counted, is left as it is.
    const withNull = `${vllm('three').slice(0, -1)},"usage":null}`;
    relay.add(JSON.parse(withNull) as ChatChunk, withNull);
    const kiln = (content: string) =>
      `${vllm(content, KILN_ID, KILN_MODEL, KILN_CREATED).slice(0, -1)},"usage":null}`;
    expect(sent.slice(1)).toEqual([kiln('two }'), kiln('three')]);
    // The first went out with the role the engine left out, and usage null too.
    expect(JSON.parse(sent[0] as string)).toMatchObject({
      usage: null,
      choices: [{ delta: { role: 'assistant' } }],
    });
  });

  it('one relay over chunks of two shapes, back and forth: each chunk renamed around its own content', () => {
    const choice = (index: number, content: string, id = 'chatcmpl-2', model = 'm', created = 3) =>
      `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[{"index":${index},"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}`;
    const sent: string[] = [];
    const relay = new ChunkRelay(false, renamer(), (t) => sent.push(t));
    const shapes = [0, 1].map((index) => {
      const text = choice(index, 'learnt');
      return ContentChunkShape.learn(JSON.parse(text) as ChatChunk, text) as ContentChunkShape;
    });
    const order: Array<[number, string]> = [
      [0, 'a'],
      [1, 'b'],
      [1, 'c'],
      [0, 'd'],
    ];
    for (const [index, content] of order) {
      const body = shapes[index]?.body(choice(index, content)) as string;
      relay.content(shapes[index] as ContentChunkShape, content, body);
    }
    expect(sent).toEqual(
      order.map(([index, content]) => choice(index, content, KILN_ID, KILN_MODEL, KILN_CREATED)),
    );
  });

  it('chunks an engine wrote without `created`, or with its id spaced, each keep their own content', () => {
    relayed(
      contents.map(
        (c) =>
          `{"id":"chatcmpl-n","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(c)}},"finish_reason":null}]}`,
      ),
    );
    relayed(
      contents.map(
        (c) =>
          `{"id": "chatcmpl-s","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(c)}},"finish_reason":null}]}`,
      ),
    );
  });
});
