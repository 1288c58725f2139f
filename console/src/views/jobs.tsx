import { useState } from 'preact/hooks';
import { api, when } from '../api.js';
import { usePoll } from '../hooks.js';
import { Pages } from './pages.js';

const KINDS = ['', 'chat', 'response', 'image.generation', 'video.generation', 'video.transition'];
const STATUSES = ['', 'queued', 'running', 'completed', 'failed', 'cancelled', 'timeout'];

/** What the kinds put in `result`: a chat completion or response, images, or a file such as a video. */
export interface JobResultBody {
  choices?: Array<{ message?: { content?: string | null } }>;
  output_text?: string;
  data?: Array<{ url?: string; b64_json?: string }>;
  url?: string;
  content_type?: string;
}

export interface Job {
  id: string;
  kind: string;
  status: string;
  created: number;
  started_at: number | null;
  finished_at: number | null;
  progress?: number;
  result?: JobResultBody;
  code?: string;
  message?: string;
  upstreamError?: unknown;
}

/** Every job of the organisation, newest first, 50 to a page, the page shown refreshed every second. */
export function JobsView() {
  const [kind, setKind] = useState('');
  const [status, setStatus] = useState('');
  // The `after=` cursor of each page gone past: the page shown starts after the last of them.
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors.at(-1);
  const query = new URLSearchParams({
    limit: '50',
    ...(kind ? { kind } : {}),
    ...(status ? { status } : {}),
    ...(after ? { after } : {}),
  });
  const { value, error } = usePoll(
    () => api<{ data: Job[]; has_more: boolean; last_id: string | null }>('GET', `/v1/jobs?${query}`),
    [kind, status, after],
    1000,
  );
  const older = value?.has_more ? value.last_id : null;
  const filter = (set: (value: string) => void) => (e: { currentTarget: HTMLSelectElement }) => {
    set(e.currentTarget.value);
    setCursors([]);
  };
  return (
    <section aria-labelledby="jobs-title">
      <h1 id="jobs-title">Jobs</h1>
      <div class="filters">
        <label>
          Kind{' '}
          <select value={kind} onChange={filter(setKind)}>
            {KINDS.map((k) => (
              <option key={k} value={k}>
                {k || 'every kind'}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status{' '}
          <select value={status} onChange={filter(setStatus)}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || 'every status'}
              </option>
            ))}
          </select>
        </label>
      </div>
      {error && <p role="alert">Could not list jobs: {error.message}</p>}
      {value && value.data.length === 0 && <p>No jobs yet.</p>}
      {value && value.data.length > 0 && (
        <table class="jobs">
          <thead>
            <tr>
              <th scope="col">Job</th>
              <th scope="col">Kind</th>
              <th scope="col">Status</th>
              <th scope="col">Progress</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {value.data.map((job) => (
              <tr key={job.id} data-job={job.id}>
                <td>
                  <a href={`#/jobs/${encodeURIComponent(job.id)}`}>{job.id}</a>
                </td>
                <td>{job.kind}</td>
                <td>
                  <span class={`status ${job.status}`}>{job.status}</span>
                </td>
                <td>{job.progress === undefined ? '—' : `${Math.round(job.progress * 100)}%`}</td>
                <td>{when(job.created)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pages cursors={cursors} setCursors={setCursors} next={older} back="Newer jobs" on="Older jobs" />
    </section>
  );
}
