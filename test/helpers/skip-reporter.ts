import { TestRunner } from 'vitest';
import type { Reporter, TestModule, Vitest } from 'vitest/node';

/**
 * Why tests were skipped, printed at the end of the run. The helper that decides a skip (no
 * PostgreSQL, no X server) calls `skipReason`, which records the reason in the test file's metadata;
 * this reporter, registered after Vitest's own, reads it back from every file that skipped tests.
 */

declare module 'vitest' {
  interface TaskMeta {
    /** Why tests of this file are skipped, as `skipReason` recorded it. */
    skipReasons?: string[];
  }
}

/**
 * Records why tests of the file being collected are skipped, and answers the reason (for the test's
 * name). `requiredBy` is the variable that turns the skip into a failure. Outside Vitest (a benchmark
 * importing a helper) it only answers.
 */
export function skipReason(reason: string, requiredBy?: string): string {
  if (!process.env.VITEST) return reason;
  const meta = TestRunner.getCurrentSuite().file.meta;
  const recorded = requiredBy ? `${reason}; set ${requiredBy}=1 to make this a failure` : reason;
  meta.skipReasons = [...new Set([...(meta.skipReasons ?? []), recorded])];
  return reason;
}

const NO_REASON = 'no reason recorded (.skip, .only, or a skip without skipReason)';

export default class SkipReporter implements Reporter {
  private vitest: Vitest | undefined;

  onInit(vitest: Vitest): void {
    this.vitest = vitest;
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    // Under -t the tests filtered out count as skipped too: then the reasons are given, but no counts.
    const filtered = this.vitest?.config.testNamePattern !== undefined;
    const byReason = new Map<string, { tests: number; files: string[] }>();
    for (const module of testModules) {
      const skipped = [...module.children.allTests('skipped')].length;
      if (skipped === 0) continue;
      const reasons = module.meta().skipReasons ?? (filtered ? [] : [NO_REASON]);
      for (const reason of reasons) {
        const entry = byReason.get(reason) ?? { tests: 0, files: [] };
        entry.tests += skipped;
        entry.files.push(module.relativeModuleId);
        byReason.set(reason, entry);
      }
    }
    if (byReason.size === 0) return;

    const lines = [...byReason].map(([reason, { tests, files }]) => {
      const where = files.length === 1 ? files[0] : `${files.length} files`;
      const count = filtered ? '' : `${tests} ${tests === 1 ? 'test' : 'tests'} in `;
      return `   ${count}${where}: ${reason}`;
    });
    this.vitest?.logger.log(['', ' Skipped, and why:', ...lines, ''].join('\n'));
  }
}
