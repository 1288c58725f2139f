// Loaded into a relay with `--import` by bench/streams/allocations.ts. Each SIGUSR2 toggles V8's
// sampling heap profiler, counting what the garbage collector has since freed too, and a record of
// the collections in between; the second writes both as JSON to
// <tmpdir>/kiln-allocations-<pid>-<n>.json. Nothing here runs until the first signal.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';

const session = new Session();
session.connect();
let collections;
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) collections?.push({ kind: entry.detail?.kind, ms: entry.duration });
});
let written = 0;

process.on('SIGUSR2', () => {
  if (collections === undefined) {
    collections = [];
    observer.observe({ entryTypes: ['gc'] });
    session.post('HeapProfiler.startSampling', {
      samplingInterval: 256,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
    return;
  }
  const gcs = collections;
  collections = undefined;
  observer.disconnect();
  session.post('HeapProfiler.stopSampling', (error, answer) => {
    const file = path.join(tmpdir(), `kiln-allocations-${process.pid}-${++written}.json`);
    writeFileSync(file, JSON.stringify(error ? { error: String(error) } : { profile: answer.profile, gcs }));
  });
});
