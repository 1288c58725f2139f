import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/keys.js';
import { KindRegistry } from '../../src/jobs/kinds.js';
import { JobService } from '../../src/jobs/service.js';
import { openStore, type Store } from '../../src/store/index.js';
import { sleepKind } from '../fixtures/sleep-kind.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';

const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;

/**
 * The PostgreSQL store prepares each statement text once per connection, by name, up to a cap on
 * names. A worker renews its leases with a term per run it holds: were every number of runs a text
 * of its own, a long-running worker would leave a prepared statement on each connection for every
 * number it ever held, and take the names the store's other statements need.
 */
describe.skipIf(postgres.skip)(`lease renewals' prepared statements: ${caseTitle(postgres)}`, () => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let schema: string;
  let jobs: JobService;
  const kind = sleepKind({ queueTtlMs: 60_000, runLimitMs: 60_000 });

  beforeEach(async () => {
    const fresh = postgres.fresh();
    cleanup = fresh.cleanup;
    schema = fresh.store.schema;
    // One connection: what it has prepared is what every statement here ran on.
    store = openStore({ ...fresh.store, pool_size: 1 });
    await store.migrate();
    jobs = new JobService(store, new KindRegistry([kind]), { retentionMs: 60_000, maxAttempts: 3 });
    await jobs.start();
  });
  afterEach(async () => {
    await jobs.stop();
    await store.close();
    await cleanup();
  });

  it('renewing every number of runs from 1 to 40 prepares six texts, and renews exactly the runs held', async () => {
    const orgId = (await store.orgs.create('acme'))?.id as string;
    const caller = (await issueKey(store, { orgId })).record;
    for (let i = 0; i < 41; i++)
      await jobs.submit({ kind: kind as never, mode: 'async', caller, request: { ms: 1 } });
    const claim = (owner: string) =>
      store.jobs.claimNext(owner, ['test.sleep'], Date.now(), Date.now() + 60_000);
    const mine = [];
    for (let i = 0; i < 40; i++) mine.push(await claim('w1'));
    const theirs = await claim('w2');
    const runs = mine.map((job) => ({ id: job?.id as string, attempt: job?.attempts as number }));

    let lastLease = 0;
    for (let n = 1; n <= 40; n++) {
      lastLease = Date.now() + 3_600_000 + n;
      // Another worker's run among them is never renewed, whatever the padding around it.
      const asked = [...runs.slice(0, n), { id: theirs?.id as string, attempt: 1 }];
      const held = await store.jobs.renewLeases('w1', asked, lastLease);
      expect(held).toEqual(new Set(runs.slice(0, n).map((run) => run.id)));
    }
    const leases = await store.driver.all<{ lease_owner: string; lease_expires_at: string }>(
      `SELECT lease_owner, lease_expires_at FROM jobs WHERE status = 'running'`,
    );
    expect(leases).toHaveLength(41);
    for (const row of leases) {
      const expected = row.lease_owner === 'w1' ? lastLease : Number(theirs?.lease_expires_at);
      expect(Number(row.lease_expires_at)).toBe(expected);
    }

    const prepared = await store.driver.all<{ statement: string }>(
      `SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'UPDATE jobs SET lease_expires_at%'`,
    );
    // Calls of 2 to 41 runs: padded to 2, 4, 8, 16, 32 and 64 terms.
    expect(prepared).toHaveLength(6);
  });

  it('a column another process adds (a rolling upgrade) breaks no statement prepared before it', async () => {
    const orgId = (await store.orgs.create('acme'))?.id as string;
    const caller = (await issueKey(store, { orgId })).record;
    const { job } = await jobs.submit({ kind: kind as never, mode: 'async', caller, request: { ms: 1 } });
    // Both `SELECT *` statements prepared on the one connection, as a running gateway has them.
    expect(await store.jobs.byId(job.id)).toMatchObject({ id: job.id });
    expect(await store.jobs.get(orgId, job.id)).toMatchObject({ id: job.id });
    const other = new pg.Client({ connectionString: POSTGRES_URL });
    await other.connect();
    const migrate = (column: string) => other.query(`ALTER TABLE "${schema}".jobs ADD COLUMN ${column} TEXT`);
    try {
      // Another process migrates; this one's prepared answers no longer have the table's columns.
      await migrate('added_by_an_upgrade');
      // In a transaction of its own, the statement fails, the transaction is run again.
      const read = await store.transaction((tx) => tx.jobs.byId(job.id), { alone: true });
      expect(read).toMatchObject({ id: job.id, added_by_an_upgrade: null });
      await migrate('added_by_another');
      // On its own, it is run again; and again and again after that, not refused each time.
      for (let i = 0; i < 3; i++)
        expect(await store.jobs.get(orgId, job.id)).toMatchObject({ id: job.id, added_by_another: null });
      expect(await store.jobs.byId(job.id)).toMatchObject({ id: job.id, added_by_another: null });
    } finally {
      await other.end();
    }
  });
});
