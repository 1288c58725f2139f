import type { Limits } from '../limits/schema.js';

/** Records as the store hands them out. Times are Unix epoch milliseconds. */

export type Tier = 'free' | 'standard';
export type Role = 'member' | 'admin';

export interface Org {
  id: string;
  name: string;
  created_at: number;
}

export interface ApiKey {
  id: string;
  org_id: string;
  org_name: string;
  /** The first characters of the key, enough to recognise it in a list; never the whole key. */
  prefix: string;
  name: string | null;
  tier: Tier;
  role: Role;
  created_at: number;
  revoked_at: number | null;
  /** The key's own limits (the tier's defaults apply besides). */
  limits: Limits;
  /** Its organisation's limits, shared by all its keys. */
  org_limits: Limits;
}

export interface ContextMeta {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  size_bytes: number;
  sha256: string;
  version: number;
  created_at: number;
  updated_at: number;
  created_by: string;
}

export interface Context extends ContextMeta {
  content: string;
}

export interface Page<T> {
  data: T[];
  has_more: boolean;
}

export type JobStatus = 'queued' | 'running' | 'completed' | 'failed' | 'cancelled' | 'timeout';
export type JobMode = 'sync' | 'async' | 'stream';
export const TERMINAL_STATUSES: readonly JobStatus[] = ['completed', 'failed', 'cancelled', 'timeout'];

/** A job row. JSON columns (request, result, error_details) are text here; the jobs layer parses them. */
export interface JobRow {
  id: string;
  org_id: string;
  key_id: string;
  kind: string;
  mode: JobMode;
  status: JobStatus;
  request: string;
  result: string | null;
  error_code: string | null;
  error_message: string | null;
  error_details: string | null;
  progress: number | null;
  attempts: number;
  max_attempts: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  queue_deadline: number;
  run_limit_ms: number;
  run_deadline: number | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  expires_at: number | null;
  webhook_url: string | null;
  webhook_secret: string | null;
  /** JSON facts a kind recorded about the run, e.g. a chat's route. */
  meta: string | null;
  /** 1 when the job has an admission (its caller is limited), settled when it ends. */
  metered: number;
  /** The submitting request's span as a W3C traceparent, when tracing was on; the job's span is its child. */
  traceparent: string | null;
  /**
   * For a stream, the worker owner of the process that holds its request (null where that process
   * has no worker): should that worker run it and lose its lease, the request died with it.
   */
  held_by: string | null;
}

/** What a terminal transition writes. */
export interface JobOutcome {
  status: Exclude<JobStatus, 'queued' | 'running'>;
  result?: unknown;
  error?: { code: string; message: string; details?: unknown };
  usage?: { inputUnits?: number; outputUnits?: number };
  /** A cancel that stopped the job while it ran: without usage, its reservation stands. */
  stoppedRunning?: boolean;
  /**
   * Events such a job's stream had relayed when it was stopped, where the cancel ran in the process
   * that ran it: its budget counts those instead of its reservation.
   */
  relayed?: number;
  /** Facts about the run kept with the job (a chat's route). */
  meta?: Record<string, unknown>;
}

export interface UsageSummary {
  kind: string;
  jobs: number;
  completed: number;
  failed: number;
  cancelled: number;
  timeout: number;
  run_ms: number;
  input_units: number;
  output_units: number;
}

export interface WebhookDelivery {
  id: string;
  job_id: string;
  org_id: string;
  url: string;
  event: string;
  body: string;
  secret: string;
  attempts: number;
  /** The job's traceparent: each attempt's span joins the trace of the request that submitted it. */
  traceparent: string | null;
}
