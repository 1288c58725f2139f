import { api } from '../api.js';
import { usePoll } from '../hooks.js';

interface Row {
  day: string;
  kind: string;
  key_id: string;
  jobs: number;
  completed: number;
  run_ms: number;
  input_units: number;
  output_units: number;
}

const COLOURS = ['#2f6db5', '#b5562f', '#2f8f5b', '#7a4fb5', '#a3871a'];
const DAY = 86_400;

/** Every UTC day (`YYYY-MM-DD`) from the one holding `since` to the one holding `until`. */
const everyDay = (since: number, until: number): string[] => {
  const days: string[] = [];
  for (let t = since - (since % DAY); t <= until; t += DAY)
    days.push(new Date(t * 1000).toISOString().slice(0, 10));
  return days;
};

/** Jobs per day and kind as a chart, and per day, kind and key as a table: the last 30 days. */
export function UsageView() {
  const { value, error } = usePoll(
    () => api<{ since: number; until: number; data: Row[] }>('GET', '/api/v1/usage/daily?days=30'),
    [],
    10_000,
  );
  if (error) return <p role="alert">Could not read usage: {error.message}</p>;
  if (!value) return <p class="loading">Loading usage…</p>;
  const rows = value.data;
  // Every day of the period, so that a day without jobs shows as a gap, not as nothing.
  const days = everyDay(value.since, value.until);
  const kinds = [...new Set(rows.map((r) => r.kind))];
  const perDay = days.map((day) => {
    const counts = kinds.map((kind) =>
      rows.filter((r) => r.day === day && r.kind === kind).reduce((sum, r) => sum + r.jobs, 0),
    );
    return { day, counts, total: counts.reduce((a, b) => a + b, 0) };
  });
  const top = Math.max(1, ...perDay.map((d) => d.total));
  const width = 40;
  const height = 160;
  const summary = perDay
    .filter((d) => d.total > 0)
    .map((d) => `${d.day}: ${d.total} jobs`)
    .join('; ');
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      {rows.length === 0 ? (
        <p>No jobs in the last 30 days.</p>
      ) : (
        <>
          <figure>
            <svg
              role="img"
              aria-label={`Jobs per day, ${days[0]} to ${days.at(-1)}. ${summary}`}
              viewBox={`0 0 ${Math.max(1, days.length) * width} ${height + 20}`}
              class="chart"
            >
              {perDay.map((d, i) => {
                let y = height;
                return d.counts.map((count, k) => {
                  const h = (count / top) * height;
                  y -= h;
                  return (
                    <rect
                      key={`${d.day}-${kinds[k]}`}
                      x={i * width + 6}
                      y={y}
                      width={width - 12}
                      height={h}
                      fill={COLOURS[k % COLOURS.length]}
                    />
                  );
                });
              })}
              {perDay.map((d, i) => (
                <text
                  key={d.day}
                  x={i * width + width / 2}
                  y={height + 15}
                  text-anchor="middle"
                  font-size="10"
                >
                  {d.day.slice(5)}
                </text>
              ))}
            </svg>
            <figcaption>
              Jobs per day by kind:{' '}
              {kinds.map((kind, k) => (
                <span key={kind} class="legend">
                  <span class="swatch" style={{ background: COLOURS[k % COLOURS.length] }} /> {kind}
                </span>
              ))}
            </figcaption>
          </figure>
          <table>
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                <th scope="col">Kind</th>
                <th scope="col">Key</th>
                <th scope="col">Jobs</th>
                <th scope="col">Completed</th>
                <th scope="col">Run time</th>
                <th scope="col">Input units</th>
                <th scope="col">Output units</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={`${r.day}-${r.kind}-${r.key_id}`}>
                  <td>{r.day}</td>
                  <td>{r.kind}</td>
                  <td>{r.key_id}</td>
                  <td>{r.jobs}</td>
                  <td>{r.completed}</td>
                  <td>{(r.run_ms / 1000).toFixed(1)} s</td>
                  <td>{r.input_units}</td>
                  <td>{r.output_units}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}
