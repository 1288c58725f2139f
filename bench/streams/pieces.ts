/**
 * The content of a trickled stream, shared by bench/upstream.ts (which writes it) and bench/streams.ts
 * (which checks every stream against it). Side-effect free, so the upstream can import it.
 */

/** The content of chunk `i` of `chunks`: a word a token long, as an engine streams them. */
export const tricklePiece = (i: number): string => ` w${i}`;

/** What a whole trickled stream of `chunks` content chunks concatenates to. */
export const trickleContent = (chunks: number): string =>
  Array.from({ length: chunks }, (_, i) => tricklePiece(i)).join('');
