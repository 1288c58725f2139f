/**
 * Progress of a job (or a download) on stderr. On a terminal: one line redrawn in place,
 * `vidgen-0193… running [██████░░░░░░] 52%`. Anywhere else (a pipe, a log file, a test): one plain
 * line per step of at least 10 % (`progress 50%`), so logs stay short and readable.
 */

/** What a poll of a job says about its progress. */
export interface ProgressState {
  status: string;
  /** 0–1; absent until the job reports some. */
  progress?: number;
}

export interface ProgressOptions {
  /** Default process.stderr. */
  stream?: NodeJS.WriteStream;
  /**
   * Show the bar from the first poll, before the job reports any progress (a media command that
   * just submitted the job). Without it the bar appears only once the job reports progress, so
   * waiting for a kind that never does (chat) stays silent.
   */
  eager?: boolean;
}

const FULL = '█';
const EMPTY = '░';
/** Redraws at most this often on a terminal (downloads report every chunk). */
const REDRAW_MS = 100;

export const percentOf = (fraction: number): number => Math.floor(Math.min(1, Math.max(0, fraction)) * 100);

/** `vidgen-0193ab12-…-…` → `vidgen-0193ab12…`: enough to tell jobs apart on one line. */
export function shortId(id: string): string {
  const match = /^([a-z]+-)?([0-9a-f]{8})-[0-9a-f-]{27}$/i.exec(id);
  return match ? `${match[1] ?? ''}${match[2]}…` : id;
}

/** `[██████░░░░░░]` for a fraction, `width` cells inside the brackets. */
export function bar(fraction: number, width: number): string {
  const filled = Math.floor(Math.min(1, Math.max(0, fraction)) * width);
  return `[${FULL.repeat(filled)}${EMPTY.repeat(width - filled)}]`;
}

export class Progress {
  readonly #stream: NodeJS.WriteStream;
  readonly #tty: boolean;
  readonly #label: string;
  #active: boolean;
  /** The last percentage printed (non-TTY), or drawn (TTY). */
  #last: number | undefined;
  #drawnAt = 0;
  /** A line is on screen that the next output must end or erase (TTY). */
  #open = false;

  constructor(label: string, options: ProgressOptions = {}) {
    this.#stream = options.stream ?? process.stderr;
    this.#tty = this.#stream.isTTY === true;
    this.#label = this.#tty ? shortId(label) : label;
    this.#active = options.eager === true;
  }

  /** A poll of the job while it is not yet terminal. */
  update(state: ProgressState): void {
    if (state.progress !== undefined) this.#active = true;
    if (!this.#active) return;
    this.#show(state.status, state.progress ?? 0, false);
  }

  /** The job is terminal: a completed job shows 100 %; the line ends either way. */
  finish(state: ProgressState): void {
    if (this.#active) {
      const fraction = state.status === 'completed' ? 1 : (state.progress ?? (this.#last ?? 0) / 100);
      // Off a terminal, only completion adds a line: a failure is reported in words by the caller.
      if (this.#tty || state.status === 'completed') this.#show(state.status, fraction, true);
    }
    this.end();
  }

  /** A byte count towards a total (a download); `total` undefined shows the bytes alone (TTY only). */
  bytes(status: string, received: number, total: number | undefined): void {
    if (!this.#tty) return;
    const now = Date.now();
    if (now - this.#drawnAt < REDRAW_MS && (total === undefined || received < total)) return;
    this.#drawnAt = now;
    const size = `${formatBytes(received)}${total === undefined ? '' : ` of ${formatBytes(total)}`}`;
    if (total === undefined || total === 0) this.#draw(`${this.#label} ${status} ${size}`);
    else this.#draw(this.#line(status, received / total, ` ${size}`));
  }

  /** Ends a line left open on a terminal, so what follows starts on its own line. */
  end(): void {
    if (this.#open) this.#stream.write('\n');
    this.#open = false;
  }

  /** Erases a line left open on a terminal (before printing something in its place). */
  clear(): void {
    if (this.#open) this.#stream.write('\r\x1b[2K');
    this.#open = false;
  }

  #show(status: string, fraction: number, final: boolean): void {
    const percent = percentOf(fraction);
    if (this.#tty) {
      const now = Date.now();
      if (!final && percent === this.#last && now - this.#drawnAt < 1000) return;
      this.#drawnAt = now;
      this.#last = percent;
      this.#draw(this.#line(status, fraction, ''));
      return;
    }
    const due =
      this.#last === undefined || percent - this.#last >= 10 || (percent === 100 && this.#last < 100);
    if (!due) return;
    this.#last = percent;
    this.#stream.write(`progress ${percent}%\n`);
  }

  #line(status: string, fraction: number, suffix: string): string {
    const head = `${this.#label} ${status} `;
    const tail = ` ${String(percentOf(fraction)).padStart(3)}%${suffix}`;
    const columns = this.#stream.columns || 80;
    const width = Math.max(10, Math.min(40, columns - head.length - tail.length - 3));
    return `${head}${bar(fraction, width)}${tail}`;
  }

  #draw(line: string): void {
    this.#stream.write(`\r\x1b[2K${line}`);
    this.#open = true;
  }
}

/** 1234567 → `1.2 MB`. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}
