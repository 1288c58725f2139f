import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { latestVersion, migrate } from '../../src/store/migrations.js';
import { KILN_BIN, type Kiln, kilnWith } from '../helpers/cli.js';
import { callGateway as call } from '../helpers/http.js';
import { POSTGRES_URL, probePostgresTools } from '../helpers/postgres.js';
import {
  type KilnProcess,
  type ProcessWorld,
  processWorld,
  spawnKiln,
  startServerProcess,
} from '../helpers/process.js';
import { storeCases } from '../helpers/stores.js';

/**
 * `kiln backup` and `kiln restore` as an operator runs them: child processes of the real CLI,
 * against a real gateway process that keeps writing while the backup is taken, and `kiln serve`
 * started on what they produced.
 */

const sqlite = storeCases[0] as (typeof storeCases)[number];

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

/** Saved once before anything else and never touched again: what every copy must still serve. */
const RUNBOOK = { name: 'ops/runbook', content: 'Drain web-1, ship, undrain. — ünïcødé 🚀\n' };

/** Starts `kiln serve` (the built CLI) with `env`; answers it once it listens, with its URL. */
async function serve(
  env: Record<string, string>,
  args: string[] = [],
): Promise<KilnProcess & { url: string }> {
  const proc = spawnKiln({ KILN_LOG_LEVEL: 'info', ...env }, ['serve', ...args], KILN_BIN);
  const line = await proc.waitForLine((l) => l.msg === 'kiln is listening');
  return Object.assign(proc, { url: String(line.url) });
}

/** What the test knows the gateway acknowledged: each context's latest version and digest. */
interface Acked {
  version: number;
  sha256: string;
}

/**
 * Writers against a gateway: lanes saving contexts of random, incompressible content up to 30 KB
 * (rows that span overflow pages, so a torn copy would show), and a lane submitting sleep jobs
 * that the gateway's workers then claim, run and finish (more rows written and rewritten).
 */
function startWriters(base: string, key: string) {
  let running = true;
  let writes = 0;
  const acked = new Map<string, Acked>();
  const failures: string[] = [];
  const contextLane = async (lane: number) => {
    for (let i = 0; running; i++) {
      const name = `lane-${lane}/ctx-${i % 60}`;
      const content = randomBytes(1 + Math.floor(Math.random() * 22_000)).toString('base64');
      const { status, body } = await call(base, key, 'POST', '/api/v1/contexts', { name, content });
      if (status !== 200 && status !== 201) failures.push(`save ${name}: ${status} ${JSON.stringify(body)}`);
      else acked.set(name, { version: body.version, sha256: sha256(content) });
      writes++;
    }
  };
  const jobLane = async () => {
    while (running) {
      const { status, body } = await call(base, key, 'POST', '/v1/test/sleep', { ms: 5, mode: 'async' });
      if (status !== 202) failures.push(`job: ${status} ${JSON.stringify(body)}`);
      writes++;
    }
  };
  const lanes = [0, 1, 2, 3].map(contextLane).concat([jobLane(), jobLane()]);
  return {
    acked,
    failures,
    writes: () => writes,
    async stop() {
      running = false;
      await Promise.all(lanes);
    },
  };
}

/** The files in `dir` whose names say they are temporary copies left behind. */
const leftovers = (dir: string) => readdirSync(dir).filter((name) => name.endsWith('.tmp'));

describe('kiln backup and kiln restore on SQLite', () => {
  let world: ProcessWorld;
  let gateway: KilnProcess & { url: string };
  let adminKey: string;
  let work: string;
  /** `kiln` with the gateway's configuration (its data dir and store), from a directory of its own. */
  let kiln: Kiln;

  beforeAll(async () => {
    world = processWorld(sqlite, 'kiln-backup-');
    work = mkdtempSync(path.join(tmpdir(), 'kiln-backup-work-'));
    gateway = await startServerProcess(world.env());
    adminKey = world.adminKey();
    kiln = kilnWith({ cwd: work, env: world.env() });
    const saved = await call(gateway.url, adminKey, 'POST', '/api/v1/contexts', RUNBOOK);
    expect(saved.status).toBe(201);
  });
  afterAll(async () => {
    await world?.cleanup();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('a backup taken while jobs are being written opens as a consistent store that kiln serve starts on', async () => {
    const liveDir = mkdtempSync(path.join(work, 'live-'));
    const writers = startWriters(gateway.url, adminKey);
    try {
      // Let the store grow (a few MB) and the workers get busy before the backup starts.
      while (writers.writes() < 400) await new Promise((resolve) => setTimeout(resolve, 20));
      const before = new Map(writers.acked);
      const writesAtStart = writers.writes();
      const file = path.join(liveDir, 'live.db');
      const result = await kiln(['backup', file]);
      const writesDuring = writers.writes() - writesAtStart;
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      const match =
        /^wrote (\S+) \((\d+) bytes, schema version (\d+)\): a consistent copy of the SQLite store (\S+)\n/.exec(
          result.stdout,
        );
      expect(match, result.stdout).not.toBeNull();
      expect(match?.[1]).toBe(file);
      expect(Number(match?.[2])).toBe(statSync(file).size);
      expect(Number(match?.[3])).toBe(latestVersion());
      expect(match?.[4]).toBe(world.env().KILN_STORE_URL?.slice('sqlite:'.length));
      // The gateway was not stopped or held up: it went on acknowledging writes meanwhile.
      expect(writesDuring).toBeGreaterThan(0);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(writers.writes()).toBeGreaterThan(writesAtStart + writesDuring);
      expect(writers.failures).toEqual([]);

      // The backup is one file (nothing beside it) and a sound database.
      expect(readdirSync(liveDir)).toEqual(['live.db']);
      const db = new Database(file, { readonly: true, fileMustExist: true });
      try {
        expect(db.prepare('PRAGMA integrity_check').pluck().all()).toEqual(['ok']);
        expect(db.prepare('PRAGMA foreign_key_check').all()).toEqual([]);
        // No torn rows: every context's content is whole, as its digest and size say.
        const contexts = db
          .prepare('SELECT name, content, sha256, size_bytes, version FROM contexts')
          .all() as Array<{
          name: string;
          content: string;
          sha256: string;
          size_bytes: number;
          version: number;
        }>;
        expect(contexts.length).toBeGreaterThan(100);
        for (const c of contexts) {
          expect(sha256(c.content), c.name).toBe(c.sha256);
          expect(Buffer.byteLength(c.content, 'utf8'), c.name).toBe(c.size_bytes);
        }
        // Everything acknowledged before the backup began is in it, at that version or later.
        const byName = new Map(contexts.map((c) => [c.name, c]));
        for (const [name, acked] of before) {
          const copy = byName.get(name);
          expect(copy, name).toBeDefined();
          expect(copy?.version, name).toBeGreaterThanOrEqual(acked.version);
          if (copy?.version === acked.version) expect(copy.sha256, name).toBe(acked.sha256);
        }
        const jobs = db.prepare('SELECT id, status, request, result FROM jobs').all() as Array<{
          id: string;
          status: string;
          request: string;
          result: string | null;
        }>;
        expect(jobs.length).toBeGreaterThan(10);
        expect(jobs.some((j) => j.status === 'completed')).toBe(true);
        for (const job of jobs) {
          expect(JSON.parse(job.request), job.id).toMatchObject({ ms: 5 });
          if (job.status === 'completed')
            expect(JSON.parse(job.result ?? 'null'), job.id).toHaveProperty('slept', 5);
        }
      } finally {
        db.close();
      }
    } finally {
      await writers.stop();
    }

    // `kiln serve`, configured by a file pointing at the backup, with a data dir of its own.
    const dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-backup-serve-'));
    try {
      const config = path.join(dataDir, 'kiln.yaml');
      writeFileSync(
        config,
        `data_dir: ${JSON.stringify(dataDir)}\nport: 0\nstore:\n  url: ${JSON.stringify(`sqlite:${path.join(liveDir, 'live.db')}`)}\n`,
      );
      const copy = await serve({}, ['--config', config]);
      const ready = await fetch(`${copy.url}/readyz`);
      expect(ready.status).toBe(200);
      const runbook = await call(copy.url, adminKey, 'GET', `/api/v1/contexts/${RUNBOOK.name}`);
      expect(runbook.status).toBe(200);
      expect(runbook.body.content).toBe(RUNBOOK.content);
      // The store had its organisations and keys: no new admin key was made for it.
      expect(existsSync(path.join(dataDir, 'admin.key'))).toBe(false);
      await copy.kill('SIGTERM');
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('refuses to overwrite an existing file without --force, and replaces it with --force', async () => {
    const file = path.join(work, 'existing.db');
    writeFileSync(file, 'yesterday’s backup, not to be lost');
    const refused = await kiln(['backup', file]);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toBe(`kiln: ${file} exists already; add --force to replace it\n`);
    expect(readFileSync(file, 'utf8')).toBe('yesterday’s backup, not to be lost');
    expect(leftovers(work)).toEqual([]);

    const forced = await kiln(['backup', file, '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain(`wrote ${file} (`);
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      expect(db.prepare('PRAGMA integrity_check').pluck().get()).toBe('ok');
      expect(db.prepare('SELECT content FROM contexts WHERE name = ?').pluck().get(RUNBOOK.name)).toBe(
        RUNBOOK.content,
      );
    } finally {
      db.close();
    }
    expect(leftovers(work)).toEqual([]);
  });

  it('given the data dir, names a backup file that is not the store itself, and that name works', async () => {
    // The store where it is by default: kiln.db in the data dir.
    const dataDir = mkdtempSync(path.join(work, 'data-'));
    const own = kilnWith({ cwd: work, env: { KILN_DATA_DIR: dataDir } });
    expect((await own(['migrate'])).code).toBe(0);
    const refused = await own(['backup', dataDir]);
    expect(refused.code).toBe(1);
    const suggested = /such as (\S+)\n$/.exec(refused.stderr)?.[1] as string;
    expect(path.dirname(suggested)).toBe(dataDir);
    const taken = await own(['backup', suggested]);
    expect(taken.code, taken.stderr).toBe(0);
    expect(taken.stdout).toContain(`wrote ${suggested} (`);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('refuses where there is no store, naming the file it looked for, and writes nothing', async () => {
    const empty = mkdtempSync(path.join(work, 'nowhere-'));
    const result = await kilnWith({ cwd: empty })(['backup', 'kiln.db']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`there is no Kiln store at ${path.join(empty, 'data', 'kiln.db')}`);
    expect(readdirSync(empty)).toEqual([]);
  });

  it('restores a backup into a fresh data dir, and kiln serve starts on it with the data', async () => {
    const file = path.join(work, 'round-trip.db');
    expect((await kiln(['backup', file])).code).toBe(0);
    const dataDir = path.join(mkdtempSync(path.join(tmpdir(), 'kiln-restore-')), 'data');
    const restoreHere = kilnWith({ cwd: work, env: { KILN_DATA_DIR: dataDir } });
    try {
      const restored = await restoreHere(['restore', file]);
      expect(restored.stderr).toBe('');
      expect(restored.code).toBe(0);
      const target = path.join(dataDir, 'kiln.db');
      expect(restored.stdout).toBe(
        `restored ${target} from ${file} (${statSync(target).size} bytes, schema version ${latestVersion()})\n`,
      );
      expect((statSync(target).mode & 0o777).toString(8)).toBe('600');
      expect(readdirSync(dataDir)).toEqual(['kiln.db']);

      let copy = await serve({ KILN_DATA_DIR: dataDir, KILN_PORT: '0' });
      expect((await fetch(`${copy.url}/readyz`)).status).toBe(200);
      const runbook = await call(copy.url, adminKey, 'GET', `/api/v1/contexts/${RUNBOOK.name}`);
      expect(runbook.status).toBe(200);
      expect(runbook.body.content).toBe(RUNBOOK.content);

      // While that gateway has the store open, nothing replaces it, --force or not.
      const note = { name: 'after-restore', content: 'written on the restored store' };
      expect((await call(copy.url, adminKey, 'POST', '/api/v1/contexts', note)).status).toBe(201);
      const busy = await restoreHere(['restore', file, '--force']);
      expect(busy.code).toBe(1);
      expect(busy.stderr).toContain(`kiln: the store at ${target} is in use`);
      expect(busy.stderr).toContain('stop it, then restore');
      expect((await call(copy.url, adminKey, 'GET', `/api/v1/contexts/${note.name}`)).status).toBe(200);

      // Stopped (killed, even, with its log not folded back), the store is replaced only with --force.
      await copy.kill('SIGKILL');
      const exists = await restoreHere(['restore', file]);
      expect(exists.code).toBe(1);
      expect(exists.stderr).toContain(
        `kiln: there is a Kiln store at ${target} already; add --force to replace it`,
      );
      const forced = await restoreHere(['restore', file, '--force']);
      expect(forced.code, forced.stderr).toBe(0);
      // The killed gateway's -wal and -shm went with the store they belonged to.
      expect(readdirSync(dataDir).filter((name) => name.startsWith('kiln.db'))).toEqual(['kiln.db']);
      copy = await serve({ KILN_DATA_DIR: dataDir, KILN_PORT: '0' });
      expect((await call(copy.url, adminKey, 'GET', `/api/v1/contexts/${note.name}`)).status).toBe(404);
      expect((await call(copy.url, adminKey, 'GET', `/api/v1/contexts/${RUNBOOK.name}`)).status).toBe(200);
      await copy.kill('SIGTERM');
    } finally {
      rmSync(path.dirname(dataDir), { recursive: true, force: true });
    }
  });

  it('refuses to replace the store of a running gateway', async () => {
    const file = path.join(work, 'for-the-live-store.db');
    expect((await kiln(['backup', file])).code).toBe(0);
    const result = await kiln(['restore', file, '--force']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      'is in use (a running kiln serve, kiln worker or other kiln command has it open)',
    );
    expect((await call(gateway.url, adminKey, 'GET', `/api/v1/contexts/${RUNBOOK.name}`)).status).toBe(200);
  });

  describe('refuses a file that is not a Kiln store it can use, and leaves no trace', () => {
    const cases: Array<{ what: string; make: (file: string) => Promise<void> | void; says: string }> = [
      {
        what: 'a text file',
        make: (file) => writeFileSync(file, 'SELECT * FROM orgs; -- not a database\n'.repeat(50)),
        says: 'is not a Kiln store: it is not an SQLite database; nothing was restored',
      },
      {
        what: 'another application’s SQLite database',
        make: (file) => {
          const db = new Database(file);
          db.exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')");
          db.close();
        },
        says: "is not a Kiln store: it is an SQLite database without Kiln's kiln_migrations table; nothing was restored",
      },
      {
        what: 'a damaged store',
        make: async (file) => {
          expect((await kiln(['backup', file])).code).toBe(0);
          // Scribble over the middle half of the file, past its header page.
          const bytes = readFileSync(file);
          randomBytes(bytes.length / 2).copy(bytes, bytes.length / 4);
          writeFileSync(file, bytes);
        },
        says: "is damaged: SQLite's integrity check found",
      },
      {
        what: 'a store from a newer Kiln',
        make: async (file) => {
          expect((await kiln(['backup', file])).code).toBe(0);
          const db = new Database(file);
          db.prepare('INSERT INTO kiln_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
            latestVersion() + 1,
            'from the future',
            Date.now(),
          );
          db.close();
        },
        says: `holds a store of schema version ${latestVersion() + 1}, newer than this Kiln`,
      },
    ];
    it.each(cases)('$what', async ({ make, says }) => {
      const file = path.join(mkdtempSync(path.join(work, 'candidate-')), 'backup.db');
      await make(file);
      const dataDir = path.join(mkdtempSync(path.join(tmpdir(), 'kiln-restore-bad-')), 'data');
      try {
        const result = await kilnWith({ cwd: work, env: { KILN_DATA_DIR: dataDir } })(['restore', file]);
        expect(result.code).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain(`kiln: ${file} ${says}`);
        expect(existsSync(dataDir)).toBe(false);
      } finally {
        rmSync(path.dirname(dataDir), { recursive: true, force: true });
      }
    });
  });
});

describe('kiln backup and kiln restore on PostgreSQL', () => {
  /** Nothing listens on port 1: the commands must not need the database to say what to run. */
  const url = 'postgres://kiln:s3cret-pass@127.0.0.1:1/kiln_prod?sslmode=disable';
  let work: string;
  let kiln: Kiln;
  beforeAll(() => {
    work = mkdtempSync(path.join(tmpdir(), 'kiln-backup-pg-'));
    kiln = kilnWith({ cwd: work, env: { KILN_STORE_URL: url, KILN_STORE_SCHEMA: 'kiln' } });
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('kiln backup prints the pg_dump and pg_restore commands for the configured database, without the password, and exits 2', async () => {
    const result = await kiln(['backup', 'nightly.dump']);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(
      'kiln backup works on SQLite stores; this store is PostgreSQL (postgres://kiln:***@127.0.0.1:1/kiln_prod, schema kiln)',
    );
    expect(result.stderr).toContain(
      "pg_dump --format=custom --schema=kiln --file=nightly.dump 'postgres://kiln@127.0.0.1:1/kiln_prod?sslmode=disable'\n",
    );
    expect(result.stderr).toContain(
      "psql --dbname='postgres://kiln@127.0.0.1:1/kiln_prod?sslmode=disable' -v ON_ERROR_STOP=1 -c 'DROP SCHEMA IF EXISTS kiln CASCADE'\n" +
        "    pg_restore --no-owner --exit-on-error --dbname='postgres://kiln@127.0.0.1:1/kiln_prod?sslmode=disable' nightly.dump\n",
    );
    expect(result.stderr).toContain('PGPASSWORD');
    expect(result.stderr).not.toContain('s3cret-pass');
    expect(readdirSync(work)).toEqual([]);
  });

  it('kiln restore prints the pg_restore command and exits 2', async () => {
    writeFileSync(path.join(work, 'nightly.dump'), 'a dump');
    const result = await kiln(['restore', 'nightly.dump']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('kiln restore works on SQLite stores; this store is PostgreSQL');
    expect(result.stderr).toContain(
      "pg_restore --no-owner --exit-on-error --dbname='postgres://kiln@127.0.0.1:1/kiln_prod?sslmode=disable' nightly.dump",
    );
    expect(result.stderr).not.toContain('s3cret-pass');
  });

  it("node-postgres's TLS settings become libpq's that mean the same, so pg_dump can connect as Kiln does", async () => {
    const base = 'postgres://kiln@127.0.0.1:1/kiln_prod';
    for (const [query, libpq] of [
      ['sslmode=no-verify', 'sslmode=require'],
      ['ssl=true', 'sslmode=verify-full'],
      ['ssl=true&sslmode=verify-ca', 'sslmode=verify-ca'],
    ]) {
      const result = await kilnWith({ cwd: work, env: { KILN_STORE_URL: `${base}?${query}` } })([
        'backup',
        'nightly.dump',
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr, query).toContain(`--file=nightly.dump '${base}?${libpq}'\n`);
    }
  });
});

/**
 * The commands `kiln backup` prints, run as printed against a real PostgreSQL: a backup of a store
 * an older Kiln left, restored after an upgrade made tables the backup does not hold. The restore
 * must give back the old store whole, at its old schema version, so that `kiln migrate` (or the
 * next `kiln serve`) upgrades it again.
 */
describe.skipIf(storeCases[1]?.skip || probePostgresTools())(
  'the printed PostgreSQL backup and restore, run',
  () => {
    let work: string;
    let database: string;
    let url: string;
    const admin = () => new pg.Client({ connectionString: POSTGRES_URL });
    beforeAll(async () => {
      work = mkdtempSync(path.join(tmpdir(), 'kiln-backup-pg-run-'));
      database = `kiln_restore_${process.pid}_${randomBytes(3).toString('hex')}`;
      const client = admin();
      await client.connect();
      await client.query(`CREATE DATABASE ${database}`);
      await client.end();
      const parsed = new URL(POSTGRES_URL);
      parsed.pathname = `/${database}`;
      url = parsed.toString();
    });
    afterAll(async () => {
      rmSync(work, { recursive: true, force: true });
      const client = admin();
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await client.end();
    });

    /** The command lines `kiln <command>` printed that run one of `programs`. */
    async function printed(command: 'backup' | 'restore', ...programs: string[]): Promise<string[]> {
      const result = await kilnWith({ cwd: work, env: { KILN_STORE_URL: url } })([command, 'kiln.dump']);
      expect(result.code, result.stderr).toBe(2);
      return result.stderr
        .split('\n')
        .map((line) => line.trim())
        .filter((line) => programs.includes(line.split(' ')[0] as string));
    }
    const run = (line: string) => execFileSync('bash', ['-c', line], { cwd: work, stdio: 'pipe' });

    it('gives back the old store at its old version over an upgraded one; kiln migrate then upgrades it again', async () => {
      const old = openStore({ url, schema: 'public', pool_size: 2 });
      await migrate(old.driver, 6);
      await old.driver.run('INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)', [
        'org_backed_up',
        'backed-up',
        Date.now(),
      ]);
      await old.close();
      const [dump] = await printed('backup', 'pg_dump');
      run(dump as string);

      const kiln = kilnWith({ cwd: work, env: { KILN_STORE_URL: url } });
      expect((await kiln(['migrate'])).code).toBe(0);
      expect((await kiln(['orgs', 'create', 'after-backup'])).code).toBe(0);

      const restore = await printed('restore', 'psql', 'pg_restore');
      expect(restore.map((line) => line.split(' ')[0])).toEqual(['psql', 'pg_restore']);
      for (const line of restore) run(line);

      const restored = openStore({ url, schema: 'public', pool_size: 2 });
      try {
        expect(await restored.schemaVersion()).toBe(6);
      } finally {
        await restored.close();
      }
      const migrated = await kiln(['migrate']);
      expect(migrated.code, migrated.stderr).toBe(0);
      const listed = await kiln(['orgs', 'list']);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toContain('backed-up');
      expect(listed.stdout).not.toContain('after-backup');
    });
  },
);
