import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { kilnWith } from '../helpers/cli.js';
import { dropSchema, POSTGRES_URL, testSchema } from '../helpers/postgres.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

/**
 * `kiln migrate` (and so `kiln serve`) pointed at another application's database refuses it and
 * changes nothing, rather than add Kiln's tables beside that application's.
 */
const cwd = mkdtempSync(path.join(tmpdir(), 'kiln-foreign-db-'));
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

const NOT_KILN =
  /the database holds tables that are not a Kiln store's \(orders, t\) and no kiln_migrations table: .*nothing was changed/;

describe('kiln migrate on a database that is not a Kiln store: sqlite', () => {
  it('refuses, names its tables and leaves it as it was; an empty file is made a store', async () => {
    const file = path.join(cwd, 'foreign.db');
    const db = new Database(file);
    db.exec('CREATE TABLE t (x); CREATE TABLE orders (id INTEGER PRIMARY KEY)');
    db.close();
    const refused = await kilnWith({ cwd, env: { KILN_STORE_URL: `sqlite:${file}` } })(['migrate']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(NOT_KILN);
    const after = new Database(file, { readonly: true });
    const tables = after.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
    after.close();
    expect(tables).toEqual([{ name: 'orders' }, { name: 't' }]);

    const empty = path.join(cwd, 'empty.db');
    new Database(empty).close();
    const made = await kilnWith({ cwd, env: { KILN_STORE_URL: `sqlite:${empty}` } })(['migrate']);
    expect(made.code, made.stderr).toBe(0);
  });
});

const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;
describe.skipIf(postgres.skip)(
  `kiln migrate on a schema that is not a Kiln store: ${caseTitle(postgres)}`,
  () => {
    it('refuses, names its tables and leaves it as it was', async () => {
      const schema = testSchema();
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      try {
        await client.query(`CREATE SCHEMA "${schema}"`);
        await client.query(`CREATE TABLE "${schema}".t (x TEXT); CREATE TABLE "${schema}".orders (id INT)`);
        const kiln = kilnWith({ cwd, env: { KILN_STORE_URL: POSTGRES_URL, KILN_STORE_SCHEMA: schema } });
        const refused = await kiln(['migrate']);
        expect(refused.code).toBe(1);
        expect(refused.stderr).toMatch(NOT_KILN);
        const { rows } = await client.query(
          'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
          [schema],
        );
        expect(rows).toEqual([{ table_name: 'orders' }, { table_name: 't' }]);
      } finally {
        await client.end();
        await dropSchema(schema);
      }
    });
  },
);
