import path from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeBrowser } from '../helpers/browser.js';
import { REPO_ROOT } from '../helpers/process.js';
import { type ConsoleRig, startConsole } from './harness.js';

const browserCheck = probeBrowser();
const EXAMPLES = path.join(REPO_ROOT, 'examples');
/** What a restarting gateway, or a proxy in front of it, answers for a moment. */
const UNAVAILABLE = {
  status: 503,
  contentType: 'application/json',
  body: JSON.stringify({ error: { code: 'unavailable', message: 'temporarily unavailable' } }),
};

/**
 * The console where the happy path ends: a revoked key, an API that fails for a moment, more
 * jobs and contexts than one page holds, a name already taken, a job that is gone, quiet days.
 * Each in a real Chromium against `kiln dev`, asserting what the page shows.
 */
describe.skipIf(!browserCheck.available)('the console when things go wrong or run long', () => {
  let rig: ConsoleRig;
  let orgName: string;

  /** A member key of the admin's organisation, made over HTTP. */
  const memberKey = async (name: string): Promise<{ id: string; key: string }> => {
    const made = await rig.call('POST', '/admin/v1/keys', rig.adminKey, { org: orgName, name });
    expect(made.status).toBe(201);
    return made.body;
  };

  /** A short chat job, submitted async over HTTP; its id. */
  const chatJob = async (content: string, maxTokens = 5): Promise<string> => {
    const submitted = await rig.call('POST', '/v1/chat/completions', rig.adminKey, {
      model: 'assistant',
      mode: 'async',
      max_tokens: maxTokens,
      messages: [{ role: 'user', content }],
    });
    expect(submitted.status).toBe(202);
    return submitted.body.id;
  };

  const settled = async (id: string) =>
    expect
      .poll(async () => (await rig.call('GET', `/v1/jobs/${id}`, rig.adminKey)).body.status, {
        timeout: 20_000,
      })
      .toBe('completed');

  /** Answers the page's requests matching `test` with a 503, `times` times. */
  const failing = async (page: Page, test: (url: URL) => boolean, times: number) => {
    let left = times;
    await page.route(test, async (route) => {
      if (left <= 0 || route.request().method() !== 'GET') return route.continue();
      left -= 1;
      await route.fulfill(UNAVAILABLE);
    });
  };

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

  it('signs out with a message when its key is revoked, and says when the models cannot be read', async () => {
    const member = await memberKey('to-revoke');
    const { context, page } = await rig.signedIn(member.key);
    await page.getByRole('heading', { name: 'Jobs' }).waitFor();
    expect((await rig.call('DELETE', `/admin/v1/keys/${member.id}`, rig.adminKey)).status).toBe(200);
    // The jobs list polls every second: its next call is refused, and the page signs out.
    await page
      .getByRole('alert')
      .filter({ hasText: 'Your key is no longer valid' })
      .waitFor({ timeout: 20_000 });
    expect(await page.getByLabel('API key').isVisible()).toBe(true);
    expect(await page.getByRole('navigation', { name: 'Console' }).count()).toBe(0);
    // The key is forgotten: a reload asks for a key, rather than trying the old one again.
    await page.reload();
    await page.getByLabel('API key').waitFor();

    const other = await rig.signedIn(rig.adminKey);
    await failing(other.page, (url) => url.pathname === '/v1/models', 1);
    await other.page.goto(`${rig.base}/console#/playground`);
    await other.page.getByRole('alert').filter({ hasText: 'Could not load the models' }).waitFor();
    await other.context.close();
    await context.close();
  });

  it('follows a transition through a failed poll until its video plays', async () => {
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.goto(`${rig.base}/console#/playground`);
    // The first poll of the job, right after it is submitted, passes; the next two answer 503.
    let polls = 0;
    await page.route(
      (url) => url.pathname.startsWith('/v1/jobs/'),
      async (route) => {
        polls += 1;
        return polls === 2 || polls === 3 ? route.fulfill(UNAVAILABLE) : route.continue();
      },
    );
    await page.getByLabel('Start image').setInputFiles(path.join(EXAMPLES, 'start.png'));
    await page.getByLabel('Duration (seconds)').fill('1');
    await page.getByRole('button', { name: 'Make the video' }).click();
    await page.getByRole('alert').filter({ hasText: 'temporarily unavailable' }).waitFor({ timeout: 30_000 });
    await page.getByTestId('transition-status').filter({ hasText: 'completed' }).waitFor({ timeout: 60_000 });
    await page.waitForFunction("document.querySelector('video')?.readyState >= 2", undefined, {
      timeout: 20_000,
    });
    expect(await page.getByRole('alert').count()).toBe(0);

    // A media job runs on a runner: its page does not claim it is waiting to be routed.
    await page.locator('.transition-job a').click();
    await page.getByTestId('job-status').filter({ hasText: 'completed' }).waitFor();
    expect(await page.getByText('Not routed').count()).toBe(0);
    await context.close();
  }, 90_000);

  it('shows the job the address names, and its errors even beside what it showed', async () => {
    const shown = await chatJob('job A');
    const gone = await chatJob('job B');
    await settled(gone);
    expect((await rig.call('DELETE', `/v1/jobs/${gone}`, rig.adminKey)).status).toBe(200);
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.goto(`${rig.base}/console#/jobs/${shown}`);
    await page.getByRole('heading', { name: shown }).waitFor();
    await page.goto(`${rig.base}/console#/jobs/${gone}`);
    await page
      .getByRole('alert')
      .filter({ hasText: `Could not load job ${gone}: job ${gone} is gone` })
      .waitFor();
    expect(await page.getByRole('heading', { name: shown }).count()).toBe(0);

    // A running job whose details fail for a moment: the page says so, beside the job it shows.
    const running = await chatJob('Write at length about kilns.', 1000);
    await page.goto(`${rig.base}/console#/jobs/${running}`);
    await page.getByRole('heading', { name: running }).waitFor();
    await failing(page, (url) => url.pathname.endsWith('/details'), 2);
    await page.getByRole('alert').filter({ hasText: 'temporarily unavailable' }).waitFor({ timeout: 20_000 });
    expect(await page.getByRole('heading', { name: running }).isVisible()).toBe(true);
    await context.close();
  });

  it('pages through more jobs and contexts than one page holds', async () => {
    const oldest = await chatJob('the oldest job');
    for (let i = 0; i < 55; i++) await chatJob(`job ${i}`);
    for (let i = 0; i < 105; i++) {
      const name = `bulk/c${String(i).padStart(3, '0')}`;
      expect((await rig.call('POST', '/api/v1/contexts', rig.adminKey, { name, content: 'x' })).status).toBe(
        201,
      );
    }
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.locator('tr[data-job]').first().waitFor();
    expect(await page.locator('tr[data-job]').count()).toBe(50);
    const row = page.locator(`tr[data-job="${oldest}"]`);
    expect(await row.count()).toBe(0);
    await page.getByRole('button', { name: 'Older jobs' }).click();
    await row.waitFor();
    await page.getByRole('button', { name: 'Newer jobs' }).click();
    await expect.poll(() => page.locator('tr[data-job]').count()).toBe(50);
    expect(await row.count()).toBe(0);

    await page.goto(`${rig.base}/console#/contexts`);
    await page.getByRole('button', { name: 'bulk/c000' }).waitFor();
    expect(await page.getByRole('button', { name: 'bulk/c104' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Next contexts' }).click();
    await page.getByRole('button', { name: 'bulk/c104' }).waitFor();
    expect(await page.getByRole('button', { name: 'Next contexts' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Previous contexts' }).click();
    await page.getByRole('button', { name: 'bulk/c000' }).waitFor();
    await context.close();
  });

  it('asks before a new context replaces one of the same name', async () => {
    const stored = await rig.call('POST', '/api/v1/contexts', rig.adminKey, {
      name: 'team/runbook',
      content: 'Step 1: page the on-call.',
    });
    expect(stored.status).toBe(201);
    const { context, page } = await rig.signedIn((await memberKey('writer')).key);
    await page.goto(`${rig.base}/console#/contexts`);
    await page.getByRole('button', { name: 'New context' }).click();
    await page.getByLabel('Name', { exact: true }).fill('team/runbook');
    await page.getByLabel('Content').fill('my scratch notes');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('alert').filter({ hasText: 'team/runbook already exists (version 1)' }).waitFor();
    const untouched = await rig.call('GET', '/api/v1/contexts/team/runbook', rig.adminKey);
    expect(untouched.body).toMatchObject({ version: 1, content: 'Step 1: page the on-call.' });

    await page.getByRole('button', { name: 'Replace team/runbook' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved team/runbook, version 2.' }).waitFor();
    const replaced = await rig.call('GET', '/api/v1/contexts/team/runbook', rig.adminKey);
    expect(replaced.body).toMatchObject({ version: 2, content: 'my scratch notes' });
    await context.close();
  });

  it('asks before an edit replaces a version a teammate saved meanwhile', async () => {
    const write = (content: string) =>
      rig.call('POST', '/api/v1/contexts', rig.adminKey, { name: 'team/oncall', content });
    expect((await write('Rota: Ana, Ben.')).status).toBe(201);
    const { context, page } = await rig.signedIn((await memberKey('editor')).key);
    await page.goto(`${rig.base}/console#/contexts`);
    // Earlier tests filled the first page: find it by its prefix.
    await page.getByLabel('Names starting with').fill('team/on');
    await page.getByRole('button', { name: 'team/oncall' }).click();
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Content').fill('Rota: Ana, Ben, Cy.');
    // A teammate saves while this edit is open.
    expect((await write('Rota: Ben, Dee.')).status).toBe(200);
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('alert').filter({ hasText: 'it is at version 2 now' }).waitFor();
    const theirs = await rig.call('GET', '/api/v1/contexts/team/oncall', rig.adminKey);
    expect(theirs.body).toMatchObject({ version: 2, content: 'Rota: Ben, Dee.' });

    await page.getByRole('button', { name: 'Replace team/oncall' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved team/oncall, version 3.' }).waitFor();
    const mine = await rig.call('GET', '/api/v1/contexts/team/oncall', rig.adminKey);
    expect(mine.body).toMatchObject({ version: 3, content: 'Rota: Ana, Ben, Cy.' });

    // Deleted while an edit is open: the save says so, and saving again creates it anew.
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Content').fill('Rota: nobody.');
    await rig.call('DELETE', '/api/v1/contexts/team/oncall', rig.adminKey);
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('alert').filter({ hasText: "no context named 'team/oncall' exists now" }).waitFor();
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved team/oncall, version 1.' }).waitFor();
    const reborn = await rig.call('GET', '/api/v1/contexts/team/oncall', rig.adminKey);
    expect(reborn.body).toMatchObject({ version: 1, content: 'Rota: nobody.' });
    await context.close();
  });

  it('deletes the context it shows, not one a teammate made since under its name', async () => {
    const write = (content: string) =>
      rig.call('POST', '/api/v1/contexts', rig.adminKey, { name: 'team/race', content });
    expect((await write('first')).status).toBe(201);
    const { context, page } = await rig.signedIn((await memberKey('deleter')).key);
    await page.goto(`${rig.base}/console#/contexts`);
    await page.getByLabel('Names starting with').fill('team/ra');
    await page.getByRole('button', { name: 'team/race' }).click();
    await page.getByRole('button', { name: 'Delete' }).click();
    // A teammate deletes it and makes another of the same name meanwhile.
    expect((await rig.call('DELETE', '/api/v1/contexts/team/race', rig.adminKey)).status).toBe(200);
    expect((await write('second, theirs')).status).toBe(201);
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page.getByRole('alert').filter({ hasText: "no context 'ctx_" }).waitFor();
    const theirs = await rig.call('GET', '/api/v1/contexts/team/race', rig.adminKey);
    expect(theirs.body).toMatchObject({ version: 1, content: 'second, theirs' });

    // Nor a version of it a teammate saved after it was opened.
    await page.getByLabel('Names starting with').fill('team/rac');
    await page.getByRole('button', { name: 'team/race' }).click();
    await page.getByRole('button', { name: 'Delete' }).click();
    expect((await write('third, theirs again')).status).toBe(200);
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: 'is not the version this delete was based on' })
      .waitFor();
    const kept = await rig.call('GET', '/api/v1/contexts/team/race', rig.adminKey);
    expect(kept.body).toMatchObject({ version: 2, content: 'third, theirs again' });
    await context.close();
  });

  it('keeps CRLF line endings through an edit, and says when the list cannot be read', async () => {
    const stored = await rig.call('POST', '/api/v1/contexts', rig.adminKey, {
      name: 'team/crlf',
      content: 'line1\r\nline2\r\n',
    });
    expect(stored.status).toBe(201);
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.goto(`${rig.base}/console#/contexts`);
    await page.getByLabel('Names starting with').fill('team/cr');
    await page.getByRole('button', { name: 'team/crlf' }).click();
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Content').focus();
    await page.keyboard.press('Control+End');
    await page.keyboard.type('!');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved team/crlf, version 2.' }).waitFor();
    const saved = await rig.call('GET', '/api/v1/contexts/team/crlf', rig.adminKey);
    expect(saved.body.content).toBe('line1\r\nline2\r\n!');

    // A prefix the API refuses (over 128 characters): the page says so instead of showing nothing.
    await page.getByLabel('Names starting with').fill('x'.repeat(129));
    await page.getByRole('alert').filter({ hasText: 'The contexts could not be listed' }).waitFor();
    await context.close();
  });

  it('keeps its key through a reload while the gateway answers 503, and survives a malformed address', async () => {
    const { context, page } = await rig.signedIn(rig.adminKey);
    await failing(page, (url) => url.pathname === '/api/v1/session', 1);
    await page.reload();
    await page.getByText('trying again').waitFor();
    await page.getByRole('navigation', { name: 'Console' }).waitFor({ timeout: 15_000 });

    // A hash that is no valid percent-encoding: the page still renders.
    await page.goto(`${rig.base}/console#/contexts/100%`);
    await page.getByRole('navigation', { name: 'Console' }).waitFor();
    await page.goto(`${rig.base}/console#/jobs`);
    await page.getByRole('heading', { name: 'Jobs' }).waitFor();
    await context.close();
  });

  it('charts every day of the last 30, with or without jobs', async () => {
    await settled(await chatJob('usage today'));
    const { context, page } = await rig.signedIn(rig.adminKey);
    await page.goto(`${rig.base}/console#/usage`);
    await page.getByRole('img', { name: /Jobs per day/ }).waitFor();
    const labels = await page.locator('svg.chart text').allTextContents();
    expect(labels).toHaveLength(30);
    expect(labels.at(-1)).toBe(new Date().toISOString().slice(5, 10));
    await context.close();
  });

  it('no page raised a JavaScript error', () => {
    // The requests these tests refuse on purpose are logged by Chromium as failed loads.
    expect(rig.errors.filter((error) => !error.includes('Failed to load resource'))).toEqual([]);
  });
});
