import type { Meter } from '../limits/meter.js';
import type { JobMode, JobOutcome, JobRow } from '../store/types.js';

/** What a handler sees of its job while it runs. */
export interface RunContext<Request> {
  /** The public id (prefixed) and the bare UUID. */
  readonly publicId: string;
  readonly id: string;
  readonly orgId: string;
  readonly request: Request;
  /** 1 on the first run; more after a crashed worker's job came back. */
  readonly attempt: number;
  /** How the submitter waits: `stream` wants partial output published. */
  readonly mode: JobMode;
  /** Reports progress in [0, 1]; it shows in the poll body. */
  progress(fraction: number): Promise<void>;
  /** Sends partial output — one server-sent event's data, as JSON text — to requests waiting on the job (streams); nothing is stored. */
  publish(data: string): void;
  /** Records facts about the run on the job (e.g. its route) and tells waiting requests. */
  record(meta: Record<string, unknown>): Promise<void>;
}

export interface HandlerResult<Result> {
  result: Result;
  usage?: JobOutcome['usage'];
}

/** The most units one job's usage counts for: an engine's figure beyond it counts this. */
export const MAX_JOB_UNITS = 2 ** 32 - 1;

/**
 * A run's usage as the ledger and the limits count it: whole units from 0 to MAX_JOB_UNITS. The
 * figures are an engine's own (an OpenAI-compatible one may report 1.5, -1 or 1e19); whatever they
 * are, both stores record the same whole numbers, and a figure that is no number counts 0. Answers
 * `usage` itself when it needs no change.
 */
export function countedUsage(usage: JobOutcome['usage']): JobOutcome['usage'] {
  if (!usage || (countable(usage.inputUnits) && countable(usage.outputUnits))) return usage;
  return { inputUnits: counted(usage.inputUnits), outputUnits: counted(usage.outputUnits) };
}

const countable = (n: unknown) =>
  n === undefined || (Number.isInteger(n) && (n as number) >= 0 && (n as number) <= MAX_JOB_UNITS);

const counted = (n: unknown) => (n === undefined ? undefined : wholeUnits(n));

/**
 * A figure as whole units from 0 to MAX_JOB_UNITS, as both stores keep them; one that is no number
 * counts 0.
 */
export const wholeUnits = (n: unknown): number =>
  typeof n === 'number' && n > 0 ? Math.min(Math.round(n), MAX_JOB_UNITS) : 0;

/**
 * A job kind is a plug-in: how its submissions and polls look, how long it may wait and run,
 * and the handler that does the work. It never sees HTTP, leases or the store.
 */
export interface JobKind<Request = unknown, Result = unknown> {
  /** The `kind` field of the poll body, e.g. `chat`. */
  readonly name: string;
  /** Public id prefix, e.g. `chatcmpl-`. */
  readonly idPrefix: string;
  /** `object` of the 202 submission body, e.g. `chat.completion.async`. */
  readonly submissionObject: string;
  /** Where the submission's `polling_url` points: `/v1/jobs/` or `/api/v1/jobs/`. */
  readonly pollingBase: '/v1/jobs/' | '/api/v1/jobs/';
  /** A queued job not claimed within this many ms ends `timeout`. */
  readonly queueTtlMs: number;
  /** A run longer than this many ms is aborted and ends `timeout`. */
  readonly runLimitMs: number;
  /** What a job counts against tokens and media limits; without one, only requests and concurrency. */
  readonly meter?: Meter<Request>;
  /** Fields the submission body adds for this kind (transitions add model, size, size_adjusted). */
  submissionExtras?(request: Request): Record<string, unknown>;
  run(job: RunContext<Request>, signal: AbortSignal): Promise<HandlerResult<Result>>;
}

/**
 * A handler's way to fail with a code of the catalogue (`inference-failed`, `workflow-model-missing`)
 * and extra top-level fields for the poll body (`model`, `upstreamError`).
 */
export class JobFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'JobFailure';
  }
}

export class KindRegistry {
  readonly #kinds = new Map<string, JobKind>();

  constructor(kinds: Iterable<JobKind<never, unknown>> = []) {
    for (const kind of kinds) this.register(kind);
  }

  register(kind: JobKind<never, unknown>): void {
    if (this.#kinds.has(kind.name)) throw new Error(`job kind ${kind.name} registered twice`);
    this.#kinds.set(kind.name, kind as JobKind);
  }

  get(name: string): JobKind | undefined {
    return this.#kinds.get(name);
  }

  names(): string[] {
    return [...this.#kinds.keys()];
  }

  /** The prefix of a job's public id; a kind no longer registered still gets a readable one. */
  prefixOf(job: Pick<JobRow, 'kind'>): string {
    return this.#kinds.get(job.kind)?.idPrefix ?? 'job-';
  }
}
