import { useEffect, useState } from 'preact/hooks';

/** A part of the route as written, where it is no valid percent-encoding (`100%`). */
const decoded = (part: string) => {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
};

/** The hash route, e.g. `#/jobs/job_123` → ['jobs', 'job_123']. */
export function useRoute(): string[] {
  const read = () => location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decoded);
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
 * Both belong to the current `deps`: when they change (another job, another filter), what was read
 * for the old ones is not returned, even for the moment before the first new answer.
 */
export function usePoll<T>(
  load: () => Promise<T>,
  deps: unknown[],
  everyMs: number,
  until?: (value: T) => boolean,
): { value: T | undefined; error: Error | undefined; refresh: () => void } {
  const of = JSON.stringify(deps);
  const [read, setRead] = useState<{ of: string; value?: T; error?: Error }>({ of });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const next = await load();
        if (stopped) return;
        setRead({ of, value: next });
        if (until?.(next)) return;
      } catch (caught) {
        if (stopped) return;
        // The last value stays, beside the error, until the next answer.
        setRead((last) => ({ of, value: last.of === of ? last.value : undefined, error: caught as Error }));
      }
      timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [of, tick]);
  const current = read.of === of;
  return {
    value: current ? read.value : undefined,
    error: current ? read.error : undefined,
    refresh: () => setTick((t) => t + 1),
  };
}
