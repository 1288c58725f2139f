/** How many pieces an answer's text gathers before joining them (StreamedText). */
const PIECES_PER_JOIN = 16;

/**
 * An answer's text as it streams in, a piece per chunk. Built with `+=`, it would hold a piece and a
 * concatenation for every chunk for as long as the answer streams: each young-generation collection
 * copies them and the next promotes them, to die in the old generation at the answer's end. Joined
 * every PIECES_PER_JOIN pieces instead, most pieces die young, and what lives on is one string per
 * join (docs/streams-history.md, the twelfth round).
 */
export class StreamedText {
  #joined = '';
  readonly #pieces: string[] = [];

  add(piece: string): void {
    this.#pieces.push(piece);
    if (this.#pieces.length < PIECES_PER_JOIN) return;
    this.#joined += this.#pieces.join('');
    this.#pieces.length = 0;
  }

  toString(): string {
    return this.#joined + this.#pieces.join('');
  }
}
