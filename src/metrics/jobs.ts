import type { JobMode, JobRow } from '../store/types.js';
import { LeanCounter, LeanHistogram } from './lean.js';

const submitted = new LeanCounter(
  'kiln_jobs_submitted_total',
  'Jobs created by this process (idempotent replays and refusals aside), by kind and mode.',
  ['kind', 'mode'],
);

const finished = new LeanCounter(
  'kiln_jobs_finished_total',
  'Jobs this process made terminal, by kind and terminal status.',
  ['kind', 'status'],
);

const wait = new LeanHistogram(
  'kiln_job_wait_seconds',
  'Time from a job’s creation to its first start, observed when it ends, by kind.',
  ['kind'],
  [0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
);

const run = new LeanHistogram(
  'kiln_job_duration_seconds',
  'Time from a job’s first start to its end, by kind and terminal status.',
  ['kind', 'status'],
  [0.05, 0.25, 1, 2.5, 5, 15, 30, 60, 120, 300, 600, 1800, 3600],
);

export function countSubmittedJob(kind: string, mode: JobMode): void {
  submitted.inc(kind, mode);
}

/** Counts a terminal job and, when it ever started, how long it waited and ran (from its row's times). */
export function observeFinishedJob(
  job: Pick<JobRow, 'kind' | 'status' | 'created_at' | 'started_at' | 'finished_at'>,
): void {
  const { kind, status } = job;
  finished.inc(kind, status);
  if (job.started_at === null) return;
  wait.observe(Math.max(0, job.started_at - job.created_at) / 1000, kind);
  if (job.finished_at !== null)
    run.observe(Math.max(0, job.finished_at - job.started_at) / 1000, kind, status);
}
