import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeBrowser } from '../helpers/browser.js';
import { type ConsoleRig, startConsole } from './harness.js';

const browserCheck = probeBrowser();

/**
 * The console where the happy path ends: a revoked key, an API that fails for a moment, more
 * jobs and contexts than one page holds, a name already taken, a job that is gone, quiet days.
 * Each in a real Chromium against `kiln dev`, asserting what the page shows.
 */
describe.skipIf(!browserCheck.available)('the console when things go wrong or run long', () => {
  let rig: ConsoleRig;
  let orgName: string;

  beforeAll(async () => {
    rig = await startConsole();
    orgName = (await rig.call('GET', '/api/v1/session', rig.adminKey)).body.org.name;
  }, 60_000);

  afterAll(() => rig?.close());

  it('makes a key only in the organisation the admin chose, and shows that choice', async () => {
    expect((await rig.call('POST', '/admin/v1/orgs', rig.adminKey, { name: 'aaa-team' })).status).toBe(201);
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.goto(`${rig.base}/console#/keys`);
    await page.getByRole('listitem').filter({ hasText: 'aaa-team' }).waitFor();
    const chosen = page.locator('#key-org option:checked');
    expect(await chosen.allTextContents()).toEqual(['Choose an organisation']);

    // Not chosen: the form is not sent, and no key is made anywhere.
    await page.getByLabel('Name (optional)').fill('unchosen');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.waitForTimeout(500);
    expect(await page.getByTestId('new-key').count()).toBe(0);
    const keys = await rig.call('GET', '/admin/v1/keys', rig.adminKey);
    expect(keys.body.data.map((k: { name: string | null }) => k.name)).not.toContain('unchosen');

    await page.getByLabel('Organisation', { exact: true }).selectOption(orgName);
    expect(await chosen.allTextContents()).toEqual([orgName]);
    await page.getByRole('button', { name: 'Create key' }).click();
    const made = (await page.getByTestId('new-key').textContent()) ?? '';
    expect((await rig.call('GET', '/api/v1/session', made)).body.org.name).toBe(orgName);
    await context.close();
  });

  it('no page raised a JavaScript error', () => {
    // The requests these tests refuse on purpose are logged by Chromium as failed loads.
    expect(rig.errors.filter((error) => !error.includes('Failed to load resource'))).toEqual([]);
  });
});
