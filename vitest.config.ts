import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Room for a test that runs while another file's servers share the machine's cores.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Two files at a time, whatever the machine (Vitest's default leaves one of two cores idle): each
    // file's servers take free ports, a PostgreSQL schema and an X display of their own.
    maxWorkers: 2,
    // Vitest's summary, then why tests were skipped (test/helpers/skip-reporter.ts).
    reporters: ['default', './test/helpers/skip-reporter.ts'],
  },
});
