import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleepKind, sleepRoutes } from '../fixtures/sleep-kind.js';
import { type Kiln, kilnWith } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * `kiln keys create|update` and `kiln orgs update` as an operator runs them — a process of their
 * own on the store — against a gateway that is serving: a change applies to the very next request.
 */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`kiln keys/orgs limits: ${caseTitle(storeCase)}`, () => {
    let server: TestServer;
    let admin: Kiln;
    let workDir: string;
    const kind = sleepKind();

    beforeAll(async () => {
      workDir = mkdtempSync(path.join(tmpdir(), 'kiln-limits-cli-'));
      server = await startTestServer(storeCase, {}, { kinds: [kind as never], routes: sleepRoutes(kind) });
      const { store } = server.server.runtime.config;
      admin = kilnWith({
        cwd: workDir,
        env: { KILN_DATA_DIR: server.dataDir, KILN_STORE_URL: store.url, KILN_STORE_SCHEMA: store.schema },
        timeoutMs: 30_000,
      });
    });
    afterAll(async () => {
      await server?.close();
      rmSync(workDir, { recursive: true, force: true });
    });

    const sleep = (key: string) =>
      server.call('POST', '/v1/test/sleep', { key, body: { ms: 1, mode: 'sync' } });

    it('a key created with --rpm is held to it; --rpm none lifts it; kiln keys list shows the limits', async () => {
      expect((await admin(['orgs', 'create', 'acme'])).code).toBe(0);
      const created = await admin(['keys', 'create', '--org', 'acme', '--rpm', '2', '--tpm', '5000']);
      expect(created.code, created.stderr).toBe(0);
      const key = created.stdout.trim();
      const id = /created (key_\S+)/.exec(created.stderr)?.[1] as string;
      expect(id).toBeDefined();

      expect((await sleep(key)).status).toBe(200);
      expect((await sleep(key)).status).toBe(200);
      const refused = await sleep(key);
      expect(refused.status).toBe(429);
      expect(refused.body.error.details[0]).toMatchObject({ field: 'requests_per_minute', limit: 2 });

      const listed = await admin(['keys', 'list', '--org', 'acme']);
      expect(listed.stdout).toMatch(/LIMITS/);
      expect(listed.stdout).toContain('rpm=2 tpm=5000');

      const lifted = await admin(['keys', 'update', id, '--rpm', 'none']);
      expect(lifted.code, lifted.stderr).toBe(0);
      expect(lifted.stdout).toContain('tpm=5000');
      expect(lifted.stdout).not.toContain('rpm=');
      expect((await sleep(key)).status).toBe(200);
    });

    it('kiln orgs update sets limits every key of the organisation shares, shown by kiln orgs list', async () => {
      await admin(['orgs', 'create', 'beta']);
      const one = (await admin(['keys', 'create', '--org', 'beta'])).stdout.trim();
      const two = (await admin(['keys', 'create', '--org', 'beta'])).stdout.trim();
      const updated = await admin(['orgs', 'update', 'beta', '--rpm', '3']);
      expect(updated.code, updated.stderr).toBe(0);
      expect(updated.stdout).toContain('rpm=3');
      const statuses = [];
      for (const key of [one, two, one, two]) statuses.push((await sleep(key)).status);
      expect(statuses).toEqual([200, 200, 200, 429]);
      const refused = await sleep(one);
      expect(refused.body.error.details[0]).toMatchObject({ scope: 'org', field: 'requests_per_minute' });
      expect((await admin(['orgs', 'list'])).stdout).toMatch(/beta\s.*rpm=3/);
    });

    it('refuses bad limits, unknown keys and organisations, and an update that changes nothing, with a clear message', async () => {
      const bad = await admin(['keys', 'create', '--org', 'acme', '--rpm', 'ten']);
      expect(bad.code).not.toBe(0);
      expect(bad.stderr).toContain('--rpm takes a whole number');
      const none = await admin(['keys', 'create', '--org', 'acme', '--rpm', 'none']);
      expect(none.code).not.toBe(0);
      expect((await admin(['orgs', 'update', 'nope', '--rpm', '1'])).stderr).toContain(
        "no organisation 'nope'",
      );
      expect((await admin(['keys', 'update', 'key_nope', '--rpm', '1'])).stderr).toContain(
        'no active key with id key_nope',
      );
      expect((await admin(['orgs', 'update', 'acme'])).stderr).toContain('nothing to change');
      expect((await admin(['keys', 'update', 'key_nope', '--tier', 'gold'])).code).not.toBe(0);
    });
  });
}
