import { Counter, Histogram } from 'prom-client';
import type { JobMode, JobRow } from '../store/types.js';
import { childOf, registry } from './registry.js';

const submitted = new Counter({
  name: 'kiln_jobs_submitted_total',
  help: 'Jobs created by this process (idempotent replays and refusals aside), by kind and mode.',
  labelNames: ['kind', 'mode'],
  registers: [registry],
});

const finished = new Counter({
  name: 'kiln_jobs_finished_total',
  help: 'Jobs this process made terminal, by kind and terminal status.',
  labelNames: ['kind', 'status'],
  registers: [registry],
});

const wait = new Histogram({
  name: 'kiln_job_wait_seconds',
  help: 'Time from a job’s creation to its first start, observed when it ends, by kind.',
  labelNames: ['kind'],
  buckets: [0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
  registers: [registry],
});

const run = new Histogram({
  name: 'kiln_job_duration_seconds',
  help: 'Time from a job’s first start to its end, by kind and terminal status.',
  labelNames: ['kind', 'status'],
  buckets: [0.05, 0.25, 1, 2.5, 5, 15, 30, 60, 120, 300, 600, 1800, 3600],
  registers: [registry],
});

const submittedChildren = new Map<string, ReturnType<typeof submitted.labels>>();
const finishedChildren = new Map<string, ReturnType<typeof finished.labels>>();
const waitChildren = new Map<string, ReturnType<typeof wait.labels>>();
const runChildren = new Map<string, ReturnType<typeof run.labels>>();

export function countSubmittedJob(kind: string, mode: JobMode): void {
  childOf(submittedChildren, submitted, kind, mode).inc();
}

/** Counts a terminal job and, when it ever started, how long it waited and ran (from its row's times). */
export function observeFinishedJob(
  job: Pick<JobRow, 'kind' | 'status' | 'created_at' | 'started_at' | 'finished_at'>,
): void {
  const { kind, status } = job;
  childOf(finishedChildren, finished, kind, status).inc();
  if (job.started_at === null) return;
  childOf(waitChildren, wait, kind).observe(Math.max(0, job.started_at - job.created_at) / 1000);
  if (job.finished_at !== null)
    childOf(runChildren, run, kind, status).observe(Math.max(0, job.finished_at - job.started_at) / 1000);
}
