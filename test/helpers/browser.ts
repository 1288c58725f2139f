import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { REPO_ROOT } from './process.js';
import { skipReason } from './skip-reporter.js';

/** Debian's Chromium (README, "Prerequisites"); nothing downloads a browser. */
export const CHROMIUM = process.env.KILN_CHROMIUM ?? '/usr/bin/chromium';

/** Where browser tests keep their screenshots: a test artefact, ignored by git. */
export const ARTIFACTS = path.join(REPO_ROOT, 'artifacts', 'console');

/**
 * Whether the browser tests can run. Missing Chromium means skipped, with the reason, unless
 * KILN_REQUIRE_BROWSER=1 (CI), where it is a failure instead.
 */
export function probeBrowser(): { available: true } | { available: false; reason: string } {
  if (existsSync(CHROMIUM)) return { available: true };
  const reason = `the console's browser tests need Chromium at ${CHROMIUM} (Debian: sudo apt-get install chromium)`;
  if (process.env.KILN_REQUIRE_BROWSER === '1') throw new Error(`KILN_REQUIRE_BROWSER=1 but ${reason}`);
  return { available: false, reason: skipReason(reason, 'KILN_REQUIRE_BROWSER') };
}

/**
 * Headless Chromium as root on a machine without a network: no sandbox (root), and none of the
 * background connections Chromium would otherwise try and fail at every start.
 */
export async function launchChromium(): Promise<Browser> {
  mkdirSync(ARTIFACTS, { recursive: true });
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--autoplay-policy=no-user-gesture-required',
    ],
  });
}
