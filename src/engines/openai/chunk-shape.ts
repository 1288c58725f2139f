import { type ChatChunk, CONTENT_KEY, type ContentShape } from '../types.js';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const isPrimitive = (value: unknown) => value === null || typeof value !== 'object';

/** Whether every own value of `object` but the one under `except` is a string, number, boolean or null. */
function primitivesBut(object: Record<string, unknown>, except: string): boolean {
  for (const key in object) if (key !== except && !isPrimitive(object[key])) return false;
  return true;
}

/** The index of the quote that closes the JSON string opened at `open`, or -1. */
function closingQuote(text: string, open: number): number {
  for (let i = open + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i;
  }
  return -1;
}

/** Whether `body` may stand between two quotes as it is: no quote, backslash or control character. */
function isPlainStringBody(body: string): boolean {
  for (let i = 0; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (c === QUOTE || c === BACKSLASH || c < 0x20) return false;
  }
  return true;
}

/**
 * An engine's content chunks, learnt from one of them: the JSON text before its content string and
 * after it. Engines write every content chunk of a stream the same way but for that string (the
 * same id, model, created, index and fields, in the same order), so a later chunk whose text is
 * the same around a different string is read without JSON.parse — the string alone is decoded —
 * and answers the object JSON.parse would. Anything else (another shape, a role, a finish reason,
 * tool calls, usage, an error) is not read here, and the caller parses it. A caller that needs only
 * the content takes it alone (`content`), without an object per chunk; one that relays the chunk's
 * text takes the content's JSON text too (`body`), to put between its own `before` and `after`.
 */
export class ContentChunkShape implements ContentShape {
  private constructor(
    /** The text up to and including the content string's opening quote. */
    readonly before: string,
    /** The text from the content string's closing quote to the end. */
    readonly after: string,
    /**
     * The chunk learnt from, a copy: every chunk read here is this one but for its content. Its own
     * fields are in the engine's order, all primitives but `choices`.
     */
    readonly like: ChatChunk,
    /** Its one choice's fields, in the engine's order; all primitives but `delta`. */
    private readonly choice: ChatChunk['choices'][number],
  ) {}

  /** The index of the choice whose content the chunks carry. */
  get index(): number {
    return this.choice.index;
  }

  /** The shape of `chunk`, parsed from `text`, when it is a content chunk this can read again. */
  static learn(chunk: ChatChunk, text: string): ContentChunkShape | undefined {
    const choice = Array.isArray(chunk.choices) && chunk.choices.length === 1 ? chunk.choices[0] : undefined;
    const delta = choice?.delta;
    if (!choice || typeof delta !== 'object' || delta === null || typeof delta.content !== 'string') return;
    // A chunk that finishes its choice is the last of it: nothing later repeats it.
    if (choice.finish_reason) return;
    if (
      Object.keys(delta).length !== 1 ||
      !primitivesBut(chunk, 'choices') ||
      !primitivesBut(choice, 'delta')
    )
      return;
    // The key exactly once: a quote inside a JSON string is escaped, so this text is the key itself.
    const key = text.indexOf(CONTENT_KEY);
    if (key === -1 || text.indexOf(CONTENT_KEY, key + 1) !== -1) return;
    const open = key + CONTENT_KEY.length - 1;
    const close = closingQuote(text, open);
    if (close === -1 || JSON.parse(text.slice(open, close + 1)) !== delta.content) return;
    // Copies: the chunk itself goes on to others, and this must not change with it.
    const copy = { ...choice, delta: { content: delta.content } };
    return new ContentChunkShape(
      text.slice(0, open + 1),
      text.slice(close),
      { ...chunk, choices: [copy] },
      copy,
    );
  }

  /** The chunk `text` is, when it has this shape; undefined when it must be parsed. */
  read(text: string): ChatChunk | undefined {
    const content = this.content(text);
    return content === undefined ? undefined : this.chunk(content);
  }

  /** A chunk of this shape with `content`. */
  chunk(content: string): ChatChunk {
    return { ...this.like, choices: [{ ...this.choice, delta: { content } }] };
  }

  /** The content of the chunk `text` is, when it has this shape; undefined when it must be parsed. */
  content(text: string): string | undefined {
    const body = this.body(text);
    return body === undefined ? undefined : this.decode(body);
  }

  /**
   * The JSON text of the content string of the chunk `text` is, between its quotes, when the text is
   * this shape's around it; undefined when it must be parsed.
   */
  body(text: string): string | undefined {
    const { before, after } = this;
    const end = text.length - after.length;
    // Slices compared with ===, not startsWith and endsWith: V8 compares those as memory, and the
    // two builtins with a string that is not a constant took five times as long (Node 20).
    if (end < before.length || text.slice(0, before.length) !== before || text.slice(end) !== after)
      return undefined;
    return text.slice(before.length, end);
  }

  /**
   * The content a `body` stands for. Should it not be one JSON string (an unescaped quote would make
   * the text another shape altogether), undefined: the whole text is the caller's to parse.
   */
  decode(body: string): string | undefined {
    if (isPlainStringBody(body)) return body;
    try {
      return JSON.parse(`"${body}"`) as string;
    } catch {
      return undefined;
    }
  }
}
