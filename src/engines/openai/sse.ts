const LF = 0x0a;
const CR = 0x0d;

/**
 * Splits a text/event-stream body into the `data:` payloads of its events as the bytes arrive,
 * without a stream or a promise per read. A line is decoded only once it is complete, so a UTF-8
 * character split across two network reads stays whole. Lines may end in LF or CRLF; fields other
 * than `data` (`event`, `id`, comments) are ignored.
 */
export class SseDecoder {
  /** The bytes of an incomplete last line. */
  #rest: Buffer | undefined;
  /** The data lines of the event being read. */
  #data: string[] = [];

  /** Feeds `bytes`; calls `onData` with the data of each event they complete, in order. */
  push(bytes: Buffer, onData: (data: string) => void): void {
    const buffer = this.#rest ? Buffer.concat([this.#rest, bytes]) : bytes;
    this.#rest = undefined;
    let start = 0;
    for (let end = buffer.indexOf(LF, start); end !== -1; end = buffer.indexOf(LF, start)) {
      const stop = end > start && buffer[end - 1] === CR ? end - 1 : end;
      if (stop === start) {
        // A blank line ends the event.
        if (this.#data.length > 0) {
          const data = this.#data.length === 1 ? (this.#data[0] as string) : this.#data.join('\n');
          this.#data = [];
          onData(data);
        }
      } else if (isDataLine(buffer, start, stop)) {
        const from = start + (buffer[start + 5] === 0x20 ? 6 : 5);
        this.#data.push(buffer.toString('utf8', from, stop));
      }
      start = end + 1;
    }
    // Copied: the reader may reuse its buffer for the next read.
    if (start < buffer.length) this.#rest = Buffer.from(buffer.subarray(start));
  }
}

/** `data:` at the start of the line, or the bare field name `data`. */
function isDataLine(buffer: Buffer, start: number, stop: number): boolean {
  return (
    stop - start >= 4 &&
    buffer[start] === 0x64 &&
    buffer[start + 1] === 0x61 &&
    buffer[start + 2] === 0x74 &&
    buffer[start + 3] === 0x61 &&
    (stop - start === 4 || buffer[start + 4] === 0x3a)
  );
}
