import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { skipReason } from './skip-reporter.js';

const execFileAsync = promisify(execFile);

export const XVFB = '/usr/bin/Xvfb';
export const XCLIP = '/usr/bin/xclip';

/**
 * Whether the real-clipboard tests can run: they need Xvfb (a headless X server) and xclip (to read
 * and write the clipboard independently of Kiln). Missing means skipped, with the reason in the
 * test name and the run's summary, unless KILN_REQUIRE_CLIPBOARD=1 (CI), where it is a failure instead.
 */
export function probeClipboard(): { available: true } | { available: false; reason: string } {
  const missing = [XVFB, XCLIP].filter((file) => !existsSync(file));
  if (missing.length === 0) return { available: true };
  const reason = `the real-clipboard tests need ${missing.join(' and ')} (Debian: sudo apt-get install xvfb xclip)`;
  if (process.env.KILN_REQUIRE_CLIPBOARD === '1') throw new Error(`KILN_REQUIRE_CLIPBOARD=1 but ${reason}`);
  return { available: false, reason: skipReason(reason, 'KILN_REQUIRE_CLIPBOARD') };
}

export interface Xvfb {
  /** The value for DISPLAY, e.g. `:3`. */
  display: string;
  stop(): Promise<void>;
}

const exited = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });

/**
 * Starts Xvfb on a free display. `-displayfd` lets Xvfb pick the display itself (no race with other
 * X servers) and write its number once it accepts connections, so there is nothing to poll.
 */
export async function startXvfb(timeoutMs = 10_000): Promise<Xvfb> {
  const child = spawn(XVFB, ['-displayfd', '3', '-nolisten', 'tcp', '-screen', '0', '320x240x24'], {
    stdio: ['ignore', 'ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString('utf8')).slice(-4000);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited(child);
  };

  const displayFd = child.stdio[3];
  if (!displayFd) throw new Error('Xvfb: no pipe for -displayfd');
  try {
    const number = await new Promise<string>((resolve, reject) => {
      let written = '';
      const timer = setTimeout(
        () => reject(new Error(`Xvfb not ready after ${timeoutMs} ms: ${log}`)),
        timeoutMs,
      );
      displayFd.on('data', (chunk: Buffer) => {
        written += chunk.toString('utf8');
        if (written.includes('\n')) {
          clearTimeout(timer);
          resolve(written.trim());
        }
      });
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`Xvfb exited (${signal ?? code}) before it was ready: ${log}`));
      });
    });
    return { display: `:${number}`, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Puts text on the CLIPBOARD selection with xclip. xclip takes the selection, then forks a child that
 * serves it until another program takes it (or the X server goes); the parent's exit means it is set.
 */
export function writeClipboard(display: string, text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(XCLIP, ['-selection', 'clipboard', '-i'], {
      env: { ...process.env, DISPLAY: display },
      // No pipes on stdout/stderr: the forked child would hold them open.
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`xclip -i exited with ${code} on ${display}`)),
    );
    child.stdin?.end(text);
  });
}

/** The CLIPBOARD selection's bytes as xclip reads them: independent of Kiln and its clipboard library. */
export async function readClipboardBytes(display: string): Promise<Buffer> {
  const { stdout } = await execFileAsync(XCLIP, ['-selection', 'clipboard', '-o'], {
    env: { ...process.env, DISPLAY: display },
    encoding: 'buffer',
    timeout: 5000,
  });
  return stdout;
}
