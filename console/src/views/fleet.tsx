import { api } from '../api.js';
import { usePoll } from '../hooks.js';

interface Fleet {
  pools: Array<{
    name: string;
    adapter: string;
    overflow: boolean;
    models: string[];
    requests: number;
    overflow_requests: number;
    replicas: Array<{
      index: number;
      healthy: boolean;
      available: boolean;
      in_flight: number;
      max_concurrency: number;
      engine_load: number | null;
      prompt_tokens: number;
      cached_tokens: number;
    }>;
  }>;
  runners: Array<{
    name: string;
    models: string[];
    available: boolean;
    in_flight: number;
    max_concurrency: number;
  }>;
}

/** `up` in green, or why not in red. */
const Health = ({ up, down }: { up: boolean; down: string }) => (
  <span class={`status ${up ? 'completed' : 'failed'}`}>{up ? 'up' : down}</span>
);

const percent = (part: number, whole: number) => (whole > 0 ? `${((part / whole) * 100).toFixed(1)}%` : '—');

/** Engine pools, their replicas and the ComfyUI runners, as this gateway sees them (admin keys). */
export function FleetView() {
  const { value, error } = usePoll(() => api<Fleet>('GET', '/admin/v1/fleet'), [], 2000);
  if (error && !value) return <p role="alert">Could not read the fleet: {error.message}</p>;
  if (!value) return <p class="loading">Loading the fleet…</p>;
  return (
    <section aria-labelledby="fleet-title">
      <h1 id="fleet-title">Fleet</h1>
      <h2>Engine pools</h2>
      <table>
        <thead>
          <tr>
            <th scope="col">Pool</th>
            <th scope="col">Replica</th>
            <th scope="col">Health</th>
            <th scope="col">In flight</th>
            <th scope="col">Engine load</th>
            <th scope="col">Prefix cache hits</th>
            <th scope="col">Requests (overflow)</th>
          </tr>
        </thead>
        <tbody>
          {value.pools.flatMap((pool) =>
            pool.replicas.map((r) => (
              <tr key={`${pool.name}-${r.index}`}>
                <td>
                  {pool.name}{' '}
                  <small>
                    ({pool.adapter}
                    {pool.overflow ? ', overflow' : ''}: {pool.models.join(', ')})
                  </small>
                </td>
                <td>{r.index}</td>
                <td>
                  <Health up={r.available} down={r.healthy ? 'ejected' : 'down'} />
                </td>
                <td>
                  {r.in_flight} / {r.max_concurrency}
                </td>
                <td>{r.engine_load ?? '—'}</td>
                <td>{percent(r.cached_tokens, r.prompt_tokens)}</td>
                <td>
                  {pool.requests} ({pool.overflow_requests})
                </td>
              </tr>
            )),
          )}
        </tbody>
      </table>
      <h2>ComfyUI runners</h2>
      {value.runners.length === 0 ? (
        <p>No runners configured.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th scope="col">Runner</th>
              <th scope="col">Models</th>
              <th scope="col">Health</th>
              <th scope="col">In flight</th>
            </tr>
          </thead>
          <tbody>
            {value.runners.map((r) => (
              <tr key={r.name}>
                <td>{r.name}</td>
                <td>{r.models.join(', ')}</td>
                <td>
                  <Health up={r.available} down="down" />
                </td>
                <td>
                  {r.in_flight} / {r.max_concurrency}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
