import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { skipReason } from './skip-reporter.js';

/** Debian's `prometheus` package installs it here (.ci/run installs the package). */
export const PROMTOOL = '/usr/bin/promtool';

/**
 * Whether the exposition can be linted: it needs Prometheus's promtool. Missing means skipped, with
 * the reason in the test name and the run's summary, unless KILN_REQUIRE_PROMTOOL=1 (CI), where it
 * is a failure instead.
 */
export function probePromtool(): { available: true } | { available: false; reason: string } {
  if (existsSync(PROMTOOL)) return { available: true };
  const reason = `the /metrics lint needs ${PROMTOOL} (Debian: sudo apt-get install prometheus)`;
  if (process.env.KILN_REQUIRE_PROMTOOL === '1') throw new Error(`KILN_REQUIRE_PROMTOOL=1 but ${reason}`);
  return { available: false, reason: skipReason(reason, 'KILN_REQUIRE_PROMTOOL') };
}

/** `promtool check metrics` on `text` (its stdin): the exit code and everything it printed. */
export function promtoolCheckMetrics(text: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PROMTOOL, ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
    child.stdin.end(text);
  });
}
