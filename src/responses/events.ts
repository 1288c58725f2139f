import type { StreamFormat } from '../api/stream.js';
import { StreamedText } from '../engines/streamed-text.js';
import type { ChatChunk } from '../engines/types.js';
import { functionCallItem, type MessagePart, messageItem, refusalPart, textPart } from './output.js';
import type { Item } from './schema.js';

/**
 * One event as the Responses stream frames it: its type as the SSE event name, then its JSON. Every
 * event's `sequence_number` is its last field, where `sequenceOf` finds it.
 */
export const frame = (event: { type: string; [field: string]: unknown }): string =>
  `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;

const SEQUENCE_FIELD = '"sequence_number":';

/**
 * The `sequence_number` of a framed event, read from the end: the field is the event's last, so the
 * same text inside a delta (escaped, and earlier) is never taken for it. -1 when there is none.
 */
export function sequenceOf(text: string): number {
  const at = text.lastIndexOf(SEQUENCE_FIELD);
  return at === -1 ? -1 : Number.parseInt(text.slice(at + SEQUENCE_FIELD.length), 10);
}

const TERMINAL_EVENT = /^event: response\.(completed|incomplete|failed)\n/;

/** A Responses stream's framing, which also hears of events the client had before (a resumed stream). */
export interface ResponsesFormat extends StreamFormat {
  /** An event the client already has: the end is numbered after it, and is none after a terminal event. */
  seen(data: string): void;
}

/**
 * Responses streams: each part is a whole event already. A response that ended without its own
 * terminal event (cancelled, timed out, its worker lost) ends with an `error` event, numbered after
 * every event the client has: those of this stream and, resumed, the `startingAfter` it had before.
 */
export function responsesFormat(startingAfter = -1): ResponsesFormat {
  let next = startingAfter + 1;
  let ended = false;
  const seen = (data: string) => {
    next = Math.max(next, sequenceOf(data) + 1);
    if (TERMINAL_EVENT.test(data)) ended = true;
  };
  return {
    seen,
    part(data) {
      seen(data);
      return data;
    },
    end(_job, error) {
      if (ended || !error) return '';
      const body = error.toBody();
      return frame({
        type: 'error',
        code: body.code,
        message: body.message,
        param: body.param ?? null,
        sequence_number: next,
      });
    },
  };
}

/** A content part of the message being written: its text, or its refusal. */
interface OpenPart {
  type: MessagePart['type'];
  /** Its `content_index`: parts are numbered in the order they began. */
  index: number;
  pieces: StreamedText;
}

interface OpenMessage {
  kind: 'message';
  id: string;
  index: number;
  /** The parts as they stream in; `content` is set from them when the message closes. */
  parts: OpenPart[];
  content: MessagePart[];
}

interface OpenCall {
  kind: 'call';
  id: string;
  index: number;
  callId: string;
  name: string;
  /** The arguments as they stream in; `args` is set from them when the call closes. */
  pieces: StreamedText;
  args: string;
}

/**
 * Chat-completion chunks as Responses stream events, numbered from 0: `response.created` and
 * `response.in_progress`, then for each output item `output_item.added`, its deltas (a message's
 * text and refusal, each a content part; a call's arguments) and their `done` events,
 * `output_item.done`; the terminal event is the caller's (`end`).
 * A background stream's first two events are the gateway's (opening.ts): `opened`, this numbers
 * from 2 and starts with `response.in_progress` alone.
 */
export class ResponseEvents {
  #seq: number;
  readonly #items: Array<OpenMessage | OpenCall> = [];
  #message: OpenMessage | undefined;
  /** Open calls by the chunk's `tool_calls[].index` (numbered 0, 1, 2 … by the engine call). */
  readonly #calls = new Map<number, OpenCall>();
  #finishReason: string | null = null;
  #started = false;

  /** `send` gets each framed event with its sequence number. */
  constructor(
    private readonly send: (text: string, seq: number) => void,
    /** The id of the output item of `type` at `index` (items.ts). */
    private readonly ids: (type: string, index: number) => string,
    private readonly opened = false,
  ) {
    this.#seq = opened ? 2 : 0;
  }

  get started(): boolean {
    return this.#started;
  }

  get finishReason(): string | null {
    return this.#finishReason;
  }

  #emit(event: Record<string, unknown> & { type: string }): void {
    const seq = this.#seq++;
    this.send(frame({ ...event, sequence_number: seq }), seq);
  }

  /** `response.created` (unless opened) and `response.in_progress`, with the response as it is now. */
  start(response: Record<string, unknown>): void {
    this.#started = true;
    if (!this.opened) this.#emit({ type: 'response.created', response });
    this.#emit({ type: 'response.in_progress', response });
  }

  chunk(chunk: ChatChunk): void {
    const choice = chunk.choices.find((c) => c.index === 0);
    if (!choice) return;
    const delta = choice.delta ?? {};
    if (typeof delta.content === 'string' && delta.content !== '') this.#delta('output_text', delta.content);
    // OpenAI's refusal (its `message.refusal`), a part of the message as the Responses API has it.
    if (typeof delta.refusal === 'string' && delta.refusal !== '') this.#delta('refusal', delta.refusal);
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls as Array<Record<string, unknown>>) this.#call(call);
    }
    if (choice.finish_reason) this.#finishReason = choice.finish_reason;
  }

  /**
   * The message's part of `type`, the message and the part begun if they were not. A part stays open
   * until its message closes, so text and refusal each keep one part in whatever order they come.
   */
  #part(type: OpenPart['type']): OpenPart {
    if (!this.#message) {
      this.#message = {
        kind: 'message',
        id: this.ids('message', this.#items.length),
        index: this.#items.length,
        parts: [],
        content: [],
      };
      this.#items.push(this.#message);
      this.#emit({
        type: 'response.output_item.added',
        output_index: this.#message.index,
        // No part yet, as OpenAI sends it: the part comes with the next event.
        item: messageItem(this.#message.id, [], 'in_progress'),
      });
    }
    const message = this.#message;
    let part = message.parts.find((p) => p.type === type);
    if (!part) {
      part = { type, index: message.parts.length, pieces: new StreamedText() };
      message.parts.push(part);
      this.#emit({
        type: 'response.content_part.added',
        item_id: message.id,
        output_index: message.index,
        content_index: part.index,
        part: type === 'refusal' ? refusalPart('') : textPart(''),
      });
    }
    return part;
  }

  #delta(type: OpenPart['type'], delta: string): void {
    const part = this.#part(type);
    part.pieces.add(delta);
    const { id, index } = this.#message as OpenMessage;
    const at = { item_id: id, output_index: index, content_index: part.index };
    if (type === 'refusal') this.#emit({ type: 'response.refusal.delta', ...at, delta });
    else this.#emit({ type: 'response.output_text.delta', ...at, delta, logprobs: [] });
  }

  #call(delta: Record<string, unknown>): void {
    const key = typeof delta.index === 'number' ? delta.index : this.#calls.size;
    const fn = (delta.function ?? {}) as { name?: unknown; arguments?: unknown };
    let call = this.#calls.get(key);
    if (!call) {
      // Text after a call would be a new message item: the current one is closed now.
      this.#closeMessage();
      const id = this.ids('function_call', this.#items.length);
      call = {
        kind: 'call',
        id,
        index: this.#items.length,
        callId: typeof delta.id === 'string' && delta.id !== '' ? delta.id : `call_${id.slice(3, 27)}`,
        name: typeof fn.name === 'string' ? fn.name : '',
        pieces: new StreamedText(),
        args: '',
      };
      this.#calls.set(key, call);
      this.#items.push(call);
      this.#emit({
        type: 'response.output_item.added',
        output_index: call.index,
        item: this.#callItem(call, 'in_progress'),
      });
    }
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      call.pieces.add(fn.arguments);
      this.#emit({
        type: 'response.function_call_arguments.delta',
        item_id: call.id,
        output_index: call.index,
        delta: fn.arguments,
      });
    }
  }

  #callItem(call: OpenCall, status: string): Item {
    return functionCallItem(
      call.id,
      { id: call.callId, function: { name: call.name, arguments: call.args } },
      status,
    );
  }

  /**
   * Closes the message being written, each part's `done` events in their order: `completed` when
   * an item follows it, else as the response ends.
   */
  #closeMessage(status: 'completed' | 'incomplete' = 'completed'): void {
    const message = this.#message;
    if (!message) return;
    this.#message = undefined;
    const { id, index } = message;
    for (const part of message.parts) {
      const text = part.pieces.toString();
      const at = { item_id: id, output_index: index, content_index: part.index };
      if (part.type === 'refusal') {
        this.#emit({ type: 'response.refusal.done', ...at, refusal: text });
        message.content.push(refusalPart(text));
      } else {
        this.#emit({ type: 'response.output_text.done', ...at, text, logprobs: [] });
        message.content.push(textPart(text));
      }
      this.#emit({ type: 'response.content_part.done', ...at, part: message.content.at(-1) });
    }
    this.#emit({
      type: 'response.output_item.done',
      output_index: index,
      item: messageItem(id, message.content, status),
    });
  }

  /**
   * The answer has ended: closes every open item and answers the output. An answer that opened
   * none is one message with empty text, as a whole answer's is (outputItems).
   */
  finish(status: 'completed' | 'incomplete'): Item[] {
    if (this.#items.length === 0) this.#part('output_text');
    return this.close(status);
  }

  /** Closes every open item and answers the output, as the stored response holds it. */
  close(status: 'completed' | 'incomplete'): Item[] {
    this.#closeMessage(status);
    // In the order they opened, which is their order in the output.
    for (const call of this.#calls.values()) {
      call.args = call.pieces.toString();
      this.#emit({
        type: 'response.function_call_arguments.done',
        item_id: call.id,
        name: call.name,
        output_index: call.index,
        arguments: call.args,
      });
      this.#emit({
        type: 'response.output_item.done',
        output_index: call.index,
        item: this.#callItem(call, status),
      });
    }
    this.#calls.clear();
    return this.#items.map((item) =>
      item.kind === 'message' ? messageItem(item.id, item.content, status) : this.#callItem(item, status),
    );
  }

  /** The terminal event: `response.completed`, `response.incomplete` or `response.failed`. */
  end(
    type: 'response.completed' | 'response.incomplete' | 'response.failed',
    response: Record<string, unknown>,
  ): void {
    this.#emit({ type, response });
  }
}
