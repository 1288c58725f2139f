import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { latestVersion, migrate } from '../../src/store/migrations.js';
import { kilnWith } from '../helpers/cli.js';
import { dropSchema, POSTGRES_URL, testSchema } from '../helpers/postgres.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/**
 * An admin command run where there is no store (the wrong directory, a schema never migrated)
 * says so and what to do, with a non-zero exit, instead of creating an empty store and listing no
 * keys. `kiln migrate` is how to create one on purpose.
 */
let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(path.join(tmpdir(), 'kiln-no-store-'));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

describe('admin commands without a store: sqlite', () => {
  it.each([
    [['keys', 'list']],
    [['orgs', 'list']],
    [['orgs', 'create', 'acme']],
    [['keys', 'create', '--org', 'acme']],
    [['orgs', 'update', 'acme', '--rpm', '1']],
    [['webhooks', 'secret', '--org', 'acme']],
  ])('kiln %s refuses, names the file it looked for and kiln migrate, and creates nothing', async (args) => {
    const dir = mkdtempSync(path.join(cwd, 'run-'));
    const result = await kilnWith({ cwd: dir })(args);
    expect(result.code).not.toBe(0);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(`there is no Kiln store at ${path.join(dir, 'data', 'kiln.db')}`);
    expect(result.stderr).toContain('kiln migrate');
    expect(result.stderr).toContain('KILN_DATA_DIR');
    expect(readdirSync(dir)).toEqual([]);
  });

  it('an existing file that holds no store (empty) is refused by name, and no store is made in it', async () => {
    const dir = mkdtempSync(path.join(cwd, 'empty-'));
    const file = path.join(dir, 'empty.db');
    writeFileSync(file, '');
    const kiln = kilnWith({ cwd: dir, env: { KILN_STORE_URL: `sqlite:${file}` } });
    for (const args of [
      ['keys', 'list'],
      ['orgs', 'create', 'acme'],
    ]) {
      const result = await kiln(args);
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(`kiln: ${file} holds no Kiln store:`);
      expect(result.stderr).toContain('kiln migrate');
    }
  });

  it('after kiln migrate, the same directory works', async () => {
    const dir = mkdtempSync(path.join(cwd, 'migrated-'));
    const kiln = kilnWith({ cwd: dir });
    const migrated = await kiln(['migrate']);
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(existsSync(path.join(dir, 'data', 'kiln.db'))).toBe(true);
    expect((await kiln(['orgs', 'create', 'acme'])).code).toBe(0);
    const listed = await kiln(['orgs', 'list']);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain('acme');
  });
});

const pg = storeCases[1] as (typeof storeCases)[number];
describe.skipIf(pg.skip)('admin commands without a store: postgres', () => {
  it('a schema that holds no store is refused by name, with the password masked, and not created', async () => {
    const schema = testSchema();
    const url = POSTGRES_URL.replace('postgres://postgres@', 'postgres://postgres:s3cret-pass@');
    const kiln = kilnWith({ cwd, env: { KILN_STORE_URL: url, KILN_STORE_SCHEMA: schema } });
    try {
      const result = await kiln(['keys', 'list']);
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(`schema ${schema} of postgres://postgres:***@`);
      expect(result.stderr).toContain('kiln migrate');
      expect(result.stderr).not.toContain('s3cret-pass');
      const migrated = await kiln(['migrate']);
      expect(migrated.code, migrated.stderr).toBe(0);
      expect((await kiln(['keys', 'list'])).code).toBe(0);
    } finally {
      await dropSchema(schema);
    }
  });
});

/**
 * A store an older Kiln left: an admin command of a newer CLI leaves its migrations alone (older
 * gateways may still be serving it) and says to run `kiln migrate`.
 */
describe.each(storeCases)('admin commands on a store with pending migrations: $name', (c) => {
  it.skipIf(c.skip)(
    `${caseTitle(c)}: refused, the store left at its version; after kiln migrate they work`,
    async () => {
      const { store: config, cleanup } = c.fresh();
      const older = openStore(config);
      await migrate(older.driver, 6);
      await older.close();
      const env = { KILN_STORE_URL: config.url, KILN_STORE_SCHEMA: config.schema };
      const kiln = kilnWith({ cwd, env });
      const versionNow = async () => {
        const store = openStore(config);
        try {
          return await store.schemaVersion();
        } finally {
          await store.close();
        }
      };
      try {
        for (const args of [
          ['orgs', 'list'],
          ['keys', 'create', '--org', 'default'],
        ]) {
          const result = await kiln(args);
          expect(result.code, args.join(' ')).not.toBe(0);
          expect(result.stdout).toBe('');
          expect(result.stderr).toContain(`the store is at schema version 6 and this Kiln`);
          expect(result.stderr).toContain('kiln migrate');
        }
        expect(await versionNow()).toBe(6);
        const migrated = await kiln(['migrate']);
        expect(migrated.code, migrated.stderr).toBe(0);
        expect(await versionNow()).toBe(latestVersion());
        const listed = await kiln(['orgs', 'list']);
        expect(listed.code, listed.stderr).toBe(0);
        expect(listed.stdout).toContain('NAME');
      } finally {
        await cleanup();
      }
    },
  );
});

/**
 * A store a newer Kiln migrated: this one knows none of its newest tables' rules, so `kiln migrate`
 * and the admin commands refuse it, as `kiln restore` does, and change nothing. (`kiln serve` serves
 * it with a warning: old gateways restart on a new schema while a compatible release rolls out.)
 */
describe.each(storeCases)('commands on a store from a newer Kiln: $name', (c) => {
  it.skipIf(c.skip)(`${caseTitle(c)}: migrate and the admin commands refuse it`, async () => {
    const { store: config, cleanup } = c.fresh();
    const newer = openStore(config);
    await newer.migrate();
    await newer.driver.run('INSERT INTO kiln_migrations (version, name, applied_at) VALUES (?, ?, ?)', [
      latestVersion() + 1,
      'from the future',
      Date.now(),
    ]);
    await newer.close();
    const env = { KILN_STORE_URL: config.url, KILN_STORE_SCHEMA: config.schema };
    const kiln = kilnWith({ cwd, env });
    const says = `the store is at schema version ${latestVersion() + 1}, newer than this Kiln`;
    try {
      for (const args of [['migrate'], ['orgs', 'list'], ['keys', 'create', '--org', 'default']]) {
        const result = await kiln(args);
        expect(result.code, args.join(' ')).not.toBe(0);
        expect(result.stdout, args.join(' ')).toBe('');
        expect(result.stderr, args.join(' ')).toContain(says);
      }
      const store = openStore(config);
      try {
        expect(await store.schemaVersion()).toBe(latestVersion() + 1);
        expect((await store.keys.list()).length).toBe(0);
      } finally {
        await store.close();
      }
    } finally {
      await cleanup();
    }
  });
});
