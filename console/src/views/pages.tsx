/**
 * The buttons of a list paged by its `after=` cursor: back to the page before (the last of
 * `cursors` dropped), on to the page after (`next`, when the list has more).
 */
export function Pages({
  cursors,
  setCursors,
  next,
  back,
  on,
}: {
  cursors: string[];
  setCursors: (cursors: string[]) => void;
  next: string | null | undefined;
  /** The buttons' words, e.g. `Newer jobs` and `Older jobs`. */
  back: string;
  on: string;
}) {
  return (
    <p class="pages">
      {cursors.length > 0 && (
        <button type="button" onClick={() => setCursors(cursors.slice(0, -1))}>
          {back}
        </button>
      )}{' '}
      {next && (
        <button type="button" onClick={() => setCursors([...cursors, next])}>
          {on}
        </button>
      )}
    </p>
  );
}
