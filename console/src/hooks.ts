import { useEffect, useState } from 'preact/hooks';

/** The hash route, e.g. `#/jobs/job_123` → ['jobs', 'job_123']. */
export function useRoute(): string[] {
  const read = () => location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const changed = () => setRoute(read());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}

/**
 * `load()` now and every `everyMs` while the view is shown (and `until` is false), so lists and
 * jobs move on the page without a reload. Returns the latest value, the latest error and a refresh.
 */
export function usePoll<T>(
  load: () => Promise<T>,
  deps: unknown[],
  everyMs: number,
  until?: (value: T) => boolean,
): { value: T | undefined; error: Error | undefined; refresh: () => void } {
  const [value, setValue] = useState<T>();
  const [error, setError] = useState<Error>();
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const next = await load();
        if (stopped) return;
        setValue(next);
        setError(undefined);
        if (until?.(next)) return;
      } catch (caught) {
        if (stopped) return;
        setError(caught as Error);
      }
      timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [...deps, tick]);
  return { value, error, refresh: () => setTick((t) => t + 1) };
}
