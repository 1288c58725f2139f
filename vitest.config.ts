import { defineConfig } from 'vitest/config';

/**
 * Files whose tests time what a process or an engine does (a stream still running seconds in, a
 * crash in the middle of a job, a drain's grace, a retention of seconds): they run one at a time,
 * after the rest, so that another file's servers do not take the cores they time.
 */
const ALONE = [
  'test/chat/slow-client.test.ts',
  'test/cli/wait.test.ts',
  'test/jobs/crash.test.ts',
  'test/jobs/orphaned-stream.test.ts',
  'test/media/hung-socket.test.ts',
  'test/media/runner-lost.test.ts',
  'test/ops/drain.test.ts',
  'test/responses/crash.test.ts',
  'test/responses/resume.test.ts',
  'test/retention/purge.test.ts',
  'test/router/routing.test.ts',
  'test/sim/llm.test.ts',
];

export default defineConfig({
  test: {
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Vitest's summary, then why tests were skipped (test/helpers/skip-reporter.ts).
    reporters: ['default', './test/helpers/skip-reporter.ts'],
    projects: [
      {
        extends: true,
        // Two files at a time, whatever the machine (Vitest's default, cores − 1, leaves one of two
        // cores idle): each file's servers take free ports, a PostgreSQL schema and an X display of
        // their own. On 2 cores a file then takes about 1.4 times as long, the suite 0.7 times.
        test: {
          name: 'shared',
          include: ['test/**/*.test.ts'],
          exclude: ALONE,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
