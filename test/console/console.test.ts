import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ARTIFACTS, probeBrowser } from '../helpers/browser.js';
import { REPO_ROOT } from '../helpers/process.js';
import { type ConsoleRig, startConsole } from './harness.js';

const browserCheck = probeBrowser();
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const EXAMPLES = path.join(REPO_ROOT, 'examples');

/**
 * The console in a real Chromium against `kiln dev` (the gateway on SQLite and its simulated
 * fleet): sign in, jobs moving live, the playground's transition playing, contexts edited, the
 * admin views only for admin keys; no JavaScript error and no serious accessibility violation.
 */
describe.skipIf(!browserCheck.available)('the console in Chromium', () => {
  let rig: ConsoleRig;
  let base: string;
  let adminKey: string;
  let memberKey: string;
  let orgName: string;
  const call: ConsoleRig['call'] = (...args) => rig.call(...args);
  const signedIn: ConsoleRig['signedIn'] = (key) => rig.signedIn(key);

  /** axe-core's serious and critical violations on the page as it stands. */
  const accessibility = async (page: Page): Promise<string[]> => {
    // Page-side code is given as text: this project's TypeScript has no DOM types.
    if (!(await page.evaluate('"axe" in window'))) await page.addScriptTag({ content: AXE });
    const violations = (await page.evaluate(
      `axe.run(document, { resultTypes: ['violations'] }).then((results) => results.violations)`,
    )) as Array<{ id: string; impact: string; help: string; nodes: unknown[] }>;
    return violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help}, ${v.nodes.length} node(s)`);
  };

  /** Checks the view for accessibility and keeps a screenshot of it. */
  const inspect = async (page: Page, name: string) => {
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
    expect(await accessibility(page), `accessibility of ${name}`).toEqual([]);
  };

  beforeAll(async () => {
    rig = await startConsole();
    ({ base, adminKey } = rig);
    const session = await call('GET', '/api/v1/session', adminKey);
    orgName = session.body.org.name;
    const member = await call('POST', '/admin/v1/keys', adminKey, {
      org: orgName,
      name: 'member',
    });
    expect(member.status).toBe(201);
    memberKey = member.body.key;
  }, 60_000);

  afterAll(() => rig?.close());

  it('signs in with a key; a chat job submitted over HTTP appears and turns completed without a reload', async () => {
    const { context, page } = await signedIn(adminKey);
    await page.evaluate('window.stillHere = true');
    // 1,000 tokens at the simulator's 5 ms each: the job runs for about 5 s.
    const submitted = await call('POST', '/v1/chat/completions', adminKey, {
      model: 'assistant',
      mode: 'async',
      max_tokens: 1000,
      messages: [{ role: 'user', content: 'Write at length about kilns.' }],
    });
    expect(submitted.status).toBe(202);
    const row = page.locator(`tr[data-job="${submitted.body.id}"]`);
    await row.waitFor({ timeout: 5000 });
    expect(['queued', 'running']).toContain(await row.locator('.status').textContent());
    await inspect(page, 'jobs');
    await expect
      .poll(() => row.locator('.status').textContent(), { timeout: 20_000, interval: 200 })
      .toBe('completed');
    expect(await page.evaluate('window.stillHere')).toBe(true);

    await row.getByRole('link').click();
    await page.getByTestId('job-status').filter({ hasText: 'completed' }).waitFor();
    const answer = await page.locator('blockquote.answer').textContent();
    expect(answer?.split(' ').length).toBeGreaterThan(100);
    expect(await page.getByRole('heading', { name: 'Route' }).isVisible()).toBe(true);
    await inspect(page, 'job');
    await context.close();
  });

  it('streams a chat in the playground, and a transition there shows progress, then plays', async () => {
    const { context, page } = await signedIn(adminKey);
    await page.goto(`${base}/console#/playground`);
    await page.getByLabel('Message').fill('Say something.');
    await page.getByRole('button', { name: 'Send' }).click();
    await expect.poll(() => page.getByTestId('chat-answer').textContent(), { timeout: 10_000 }).not.toBe('');
    await page.getByRole('button', { name: 'Send' }).waitFor();

    await page.getByLabel('Start image').setInputFiles(path.join(EXAMPLES, 'start.png'));
    await page.getByLabel('End image (optional)').setInputFiles(path.join(EXAMPLES, 'end.png'));
    await page.getByLabel('Size').selectOption('832x480');
    await page.getByLabel('Duration (seconds)').fill('2');
    await page.getByRole('button', { name: 'Make the video' }).click();
    await page.getByTestId('transition-progress').waitFor({ timeout: 10_000 });
    await inspect(page, 'playground-progress');
    // HAVE_CURRENT_DATA or better: the clip has decoded frames to show.
    await page.waitForFunction("document.querySelector('video')?.readyState >= 2", undefined, {
      timeout: 60_000,
    });
    expect(await page.getByTestId('transition-status').textContent()).toBe('completed');
    await inspect(page, 'playground-video');
    await context.close();
  });

  it('creates a context, edits it to version 2 and deletes it', async () => {
    const { context, page } = await signedIn(adminKey);
    await page.goto(`${base}/console#/contexts`);
    await page.getByRole('button', { name: 'New context' }).click();
    await page.getByLabel('Name', { exact: true }).fill('console/house-style');
    await page.getByLabel('Content').fill('Write plainly.');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('status').filter({ hasText: 'version 1' }).waitFor();
    expect(await page.getByTestId('context-version').textContent()).toBe('1');
    await inspect(page, 'contexts');

    // A slow read of one context must not leave the old version showing beside the new one's notice.
    await page.route(
      (url) => url.pathname.startsWith('/api/v1/contexts/'),
      async (route) => {
        if (route.request().method() === 'GET') await new Promise((r) => setTimeout(r, 500));
        await route.continue();
      },
    );
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Content').fill('Write plainly, and briefly.');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('status').filter({ hasText: 'version 2' }).waitFor();
    expect(await page.getByTestId('context-version').textContent()).toBe('2');
    const stored = await call('GET', '/api/v1/contexts/console/house-style', adminKey);
    expect(stored.body).toMatchObject({ version: 2, content: 'Write plainly, and briefly.' });

    await page.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page.getByRole('status').filter({ hasText: 'Deleted console/house-style' }).waitFor();
    await expect.poll(() => page.getByRole('button', { name: 'console/house-style' }).count()).toBe(0);
    expect((await call('GET', '/api/v1/contexts/console/house-style', adminKey)).status).toBe(404);
    await context.close();
  });

  it('shows usage, the fleet and keys to an admin; a key made there works once shown', async () => {
    const { context, page } = await signedIn(adminKey);
    await page.goto(`${base}/console#/usage`);
    await page.getByRole('img', { name: /Jobs per day/ }).waitFor();
    expect(await page.getByRole('cell', { name: 'chat', exact: true }).count()).toBeGreaterThan(0);
    await inspect(page, 'usage');

    await page.getByRole('link', { name: 'Fleet' }).click();
    await page.getByRole('heading', { name: 'Engine pools' }).waitFor();
    expect(await page.locator('tbody tr').count()).toBeGreaterThanOrEqual(5);
    await inspect(page, 'fleet');

    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByLabel('Organisation', { exact: true }).selectOption(orgName);
    await page.getByLabel('Name (optional)').fill('made-in-console');
    await page.getByRole('button', { name: 'Create key' }).click();
    const made = (await page.getByTestId('new-key').textContent()) ?? '';
    expect(made).toMatch(/^kiln_sk_/);
    expect((await call('GET', '/v1/models', made)).status).toBe(200);
    await page.getByRole('cell', { name: 'made-in-console' }).waitFor();
    await inspect(page, 'keys');
    await context.close();
  });

  it('a member key sees no admin views, and the admin API answers it 403', async () => {
    const { context, page } = await signedIn(memberKey);
    const links = await page.getByRole('navigation', { name: 'Console' }).getByRole('link').allTextContents();
    expect(links).toEqual(['Jobs', 'Playground', 'Contexts', 'Usage']);
    await page.goto(`${base}/console#/keys`);
    await page.getByRole('alert').filter({ hasText: 'no such page' }).waitFor();
    await inspect(page, 'member');
    for (const route of ['/admin/v1/keys', '/admin/v1/orgs', '/admin/v1/fleet']) {
      expect((await call('GET', route, memberKey)).status, route).toBe(403);
    }
    await context.close();
  });

  it('no page raised or logged a JavaScript error', () => {
    expect(rig.errors).toEqual([]);
  });
});
