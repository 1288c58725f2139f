import { useState } from 'preact/hooks';
import { api, TERMINAL, when } from '../api.js';
import { usePoll } from '../hooks.js';
import type { Job } from './jobs.js';
import { JobResult } from './result.js';

interface Details {
  job: Job;
  mode: string;
  attempts: number;
  request: unknown;
  route: Record<string, unknown> | null;
  webhook: {
    url: string | null;
    delivery: {
      status: string;
      attempts: number;
      last_status: number | null;
      last_error: string | null;
      delivered_at: number | null;
      next_attempt_at: number | null;
    } | null;
  } | null;
}

const MEDIA = /^(image|video)\./;

const duration = (from: number | null, to: number | null) =>
  from !== null && to !== null ? `${Math.max(0, to - from)} s` : '—';

/** One job: request, route, progress, timings, result or error, webhook delivery; cancel. */
export function JobView({ id }: { id: string }) {
  const [cancelError, setCancelError] = useState<string>();
  const { value, error, refresh } = usePoll(
    () => api<Details>('GET', `/api/v1/jobs/${encodeURIComponent(id)}/details`),
    [id],
    700,
    // A finished job changes no more, but a webhook may still be on its way.
    (d) => TERMINAL.has(d.job.status) && d.webhook?.delivery?.status !== 'pending',
  );
  const cancel = async () => {
    setCancelError(undefined);
    try {
      await api('POST', `/v1/jobs/${encodeURIComponent(id)}/cancel`);
    } catch (caught) {
      setCancelError((caught as Error).message);
    }
    refresh();
  };
  const failed = error && (
    <p role="alert">
      Could not load job {id}: {error.message}
    </p>
  );
  if (!value) return failed || <p class="loading">Loading job {id}…</p>;
  const { job } = value;
  const done = TERMINAL.has(job.status);
  return (
    <section aria-labelledby="job-title">
      <p>
        <a href="#/jobs">← All jobs</a>
      </p>
      <h1 id="job-title">{job.id}</h1>
      {failed}
      <dl class="facts">
        <dt>Kind</dt>
        <dd>{job.kind}</dd>
        <dt>Status</dt>
        <dd>
          <span class={`status ${job.status}`} data-testid="job-status">
            {job.status}
          </span>
        </dd>
        <dt>Mode</dt>
        <dd>{value.mode}</dd>
        <dt>Created</dt>
        <dd>{when(job.created)}</dd>
        <dt>Waited</dt>
        <dd>{duration(job.created, job.started_at)}</dd>
        <dt>Ran</dt>
        <dd>{duration(job.started_at, job.finished_at)}</dd>
        <dt>Attempts</dt>
        <dd>{value.attempts}</dd>
      </dl>
      {!done && (
        <p>
          <label>
            Progress{' '}
            <progress max={1} value={job.progress ?? undefined}>
              {job.progress === undefined ? 'waiting' : `${Math.round(job.progress * 100)}%`}
            </progress>
          </label>{' '}
          <button type="button" onClick={cancel}>
            Cancel job
          </button>
        </p>
      )}
      {cancelError && <p role="alert">{cancelError}</p>}
      {job.code && (
        <div class="error" role="status">
          <h2>Error</h2>
          <p>
            <code>{job.code}</code>: {job.message}
          </p>
          {job.upstreamError !== undefined && <pre>{JSON.stringify(job.upstreamError, null, 2)}</pre>}
        </div>
      )}
      {job.result && (
        <>
          <h2>Result</h2>
          <JobResult job={job} />
        </>
      )}
      {value.route ? (
        <>
          <h2>Route</h2>
          <pre>{JSON.stringify(value.route, null, 2)}</pre>
        </>
      ) : (
        // Media jobs run on a runner, not a routed engine replica: they never have a route to show.
        !MEDIA.test(job.kind) && (
          <>
            <h2>Route</h2>
            <p>{done ? 'Not routed.' : 'Not routed yet.'}</p>
          </>
        )
      )}
      <h2>Webhook</h2>
      {!value.webhook ? (
        <p>None asked for.</p>
      ) : (
        <dl class="facts">
          <dt>To</dt>
          <dd>{value.webhook.url}</dd>
          <dt>Delivery</dt>
          <dd>
            {value.webhook.delivery
              ? `${value.webhook.delivery.status}, ${value.webhook.delivery.attempts} attempt(s)` +
                (value.webhook.delivery.last_status
                  ? `, last answer HTTP ${value.webhook.delivery.last_status}`
                  : '') +
                (value.webhook.delivery.last_error
                  ? `, last error: ${value.webhook.delivery.last_error}`
                  : '')
              : 'not yet (the job has not finished)'}
          </dd>
        </dl>
      )}
      <h2>Request</h2>
      <pre>{JSON.stringify(value.request, null, 2)}</pre>
    </section>
  );
}
