import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../helpers/browser.js';
import { KILN_BIN } from '../helpers/cli.js';

export interface ConsoleRig {
  base: string;
  adminKey: string;
  browser: Browser;
  /** Every JavaScript error any page raised or logged, with the view it was on. */
  errors: string[];
  /** An API call over HTTP with `key` as the bearer. */
  call: (
    method: string,
    route: string,
    key: string,
    body?: unknown,
  ) => Promise<{ status: number; body: any }>;
  /** A fresh tab (its own session storage) signed in with `key`. */
  signedIn: (key: string) => Promise<{ context: BrowserContext; page: Page }>;
  close: () => Promise<void>;
}

/**
 * `kiln dev` (the gateway on SQLite and its simulated fleet) in a fresh directory, listening on
 * 127.0.0.1, and a headless Chromium to drive its console.
 */
export async function startConsole(): Promise<ConsoleRig> {
  const dir = mkdtempSync(path.join(tmpdir(), 'kiln-console-'));
  const dev: ChildProcess = spawn(process.execPath, [KILN_BIN, 'dev'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '', KILN_PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const base = await new Promise<string>((resolve, reject) => {
    let seen = '';
    dev.once('exit', (code) => reject(new Error(`kiln dev exited with ${code}: ${seen}`)));
    dev.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      seen += chunk;
      const match = /Kiln dev is running at (\S+)\/v1/.exec(seen);
      if (match) resolve(match[1] as string);
    });
  });
  const adminKey = readFileSync(path.join(dir, 'data', 'admin.key'), 'utf8').trim();
  const browser = await launchChromium();
  const errors: string[] = [];

  const call: ConsoleRig['call'] = async (method, route, key, body) => {
    const response = await fetch(`${base}${route}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const json: any = await response.json().catch(() => undefined);
    return { status: response.status, body: json };
  };

  const signedIn: ConsoleRig['signedIn'] = async (key) => {
    // axe-core is injected as an inline script, which the console's CSP rightly refuses.
    const context = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.on('pageerror', (error) => errors.push(`${page.url()}: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') errors.push(`${page.url()}: ${message.text()}`);
    });
    await page.goto(`${base}/console`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
    return { context, page };
  };

  const close = async () => {
    await browser.close();
    dev.kill('SIGTERM');
    await new Promise((resolve) => dev.once('exit', resolve));
    rmSync(dir, { recursive: true, force: true });
  };

  return { base, adminKey, browser, errors, call, signedIn, close };
}
