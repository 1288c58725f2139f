import { randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  createReadStream,
  createWriteStream,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  realpathSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
} from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { latestVersion } from '../store/migrations.js';
import { shownStoreUrl } from '../store/postgres/open-error.js';
import type { StoreFileCheck } from '../store/sqlite/driver.js';
import { VERSION } from '../version.js';
import { NO_STORE_FIX, serverConfig, UsageError } from './common.js';

/** The exit code of `kiln backup` and `kiln restore` on PostgreSQL, whose own tools do the work. */
const USE_POSTGRES_TOOLS = 2;

/** Said, as the admin commands say it, when the configuration names no existing store. */

/** The files SQLite may keep beside a database; a stale one would be replayed into another. */
const COMPANIONS = ['-wal', '-shm', '-journal'];

/** The database file of a `sqlite:` store URL, absolute. */
function sqliteFile(url: string): string {
  if (url === 'sqlite::memory:') {
    throw new UsageError('store.url is sqlite::memory:, a store that lives and dies with one process');
  }
  return path.resolve(url.slice('sqlite:'.length));
}

const statOf = (file: string): Stats | undefined => statSync(file, { throwIfNoEntry: false });

/** Whether two paths name the same file (through links too), as far as both exist. */
function sameFile(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}

/** A word for the shell: as it is when that is safe, in single quotes otherwise. */
const shellWord = (word: string) =>
  /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;

/** Query parameters libpq understands; node-postgres's own (`ssl=true`, …) would make pg_dump fail. */
const LIBPQ_PARAMETERS = new Set([
  'host',
  'port',
  'sslmode',
  'sslrootcert',
  'sslcert',
  'sslkey',
  'options',
  'application_name',
  'connect_timeout',
]);

/**
 * The store URL as pg_dump takes it, without the password; undefined when it does not parse.
 * node-postgres's TLS settings become libpq's that mean the same: `sslmode=no-verify` (encrypted,
 * certificate unchecked) is libpq's `require`; `ssl=true` (certificate checked) is `verify-full`.
 */
function libpqUrl(url: string): { url: string; password: boolean } | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  const password = parsed.password !== '' || parsed.searchParams.has('password');
  parsed.password = '';
  const { searchParams: query } = parsed;
  if (query.get('sslmode') === 'no-verify') query.set('sslmode', 'require');
  if (!query.has('sslmode') && ['true', '1'].includes(query.get('ssl') ?? '')) {
    query.set('sslmode', 'verify-full');
  }
  for (const name of [...query.keys()]) {
    if (!LIBPQ_PARAMETERS.has(name)) query.delete(name);
  }
  return { url: parsed.toString(), password };
}

/**
 * PostgreSQL has its own consistent online backup, pg_dump; Kiln does not copy it. Says how, with
 * the commands for the configured database and schema (no password in them), and exits 2.
 */
function leaveToPostgresTools(
  command: 'backup' | 'restore',
  url: string,
  schema: string,
  file: string,
): void {
  const target = libpqUrl(url);
  const lines = [
    `kiln: kiln ${command} works on SQLite stores; this store is PostgreSQL (${shownStoreUrl(url)}, schema ${schema}).`,
  ];
  if (!target) {
    lines.push('  Use pg_dump to back it up and pg_restore to restore it.');
  } else {
    const dbname = shellWord(target.url);
    const dumpFile = shellWord(file);
    // Restoring drops the schema first: pg_restore's --clean drops only what the dump holds, and a
    // table a later migration made would stay and stop that migration running again.
    lines.push(
      '  Back it up with pg_dump, which copies one consistent snapshot while gateways keep serving:',
      `    pg_dump --format=custom --schema=${schema} --file=${dumpFile} ${dbname}`,
      `  Restore it with every gateway and worker stopped: drop schema ${schema} (everything in it goes), restore`,
      `  the dump, then start \`kiln serve\` (it applies pending migrations). Run them as schema ${schema}'s owner:`,
      `    psql --dbname=${dbname} -v ON_ERROR_STOP=1 -c 'DROP SCHEMA IF EXISTS ${schema} CASCADE'`,
      `    pg_restore --no-owner --exit-on-error --dbname=${dbname} ${dumpFile}`,
    );
    if (target.password) {
      lines.push('  The password is left out: they take it from PGPASSWORD or ~/.pgpass, or ask for it.');
    }
  }
  process.stderr.write(`${lines.join('\n')}\n`);
  process.exitCode = USE_POSTGRES_TOOLS;
}

/** Why a file is not a store Kiln can use, as the rest of a sentence that starts with its name. */
function problemOf(check: Extract<StoreFileCheck, { ok: false }>): string {
  switch (check.problem) {
    case 'not-sqlite':
      return 'is not a Kiln store: it is not an SQLite database';
    case 'not-kiln':
      return "is not a Kiln store: it is an SQLite database without Kiln's kiln_migrations table";
    case 'damaged': {
      const more = check.details.length > 3 ? ` (and ${check.details.length - 3} more)` : '';
      return `is damaged: SQLite's integrity check found ${check.details.slice(0, 3).join('; ')}${more}`;
    }
  }
}

/** A new name beside `file`, in its directory, so that renaming it over `file` is atomic. */
const tempBeside = (file: string) =>
  path.join(
    path.dirname(file),
    `.${path.basename(file)}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`,
  );

function fsyncPath(file: string): void {
  const fd = openSync(file, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Runs `work` with `temp` and whatever SQLite kept beside it removed afterwards, even when `work`
 * failed or the command was interrupted: a failed backup or restore leaves nothing half-written.
 */
async function withTemp<T>(temp: string, work: () => Promise<T>): Promise<T> {
  const remove = () => {
    for (const suffix of ['', ...COMPANIONS]) rmSync(`${temp}${suffix}`, { force: true });
  };
  const interrupted = (signal: NodeJS.Signals) => {
    remove();
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  try {
    return await work();
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
    remove();
  }
}

/** Puts `temp` in the place of `file` for good: its bytes on disk first, then the rename, then the directory entry. */
function replaceDurably(temp: string, file: string): void {
  fsyncPath(temp);
  renameSync(temp, file);
  fsyncPath(path.dirname(file));
}

/** `kiln backup <file>`: a consistent copy of the SQLite store, taken while gateways keep serving. */
async function backup(file: string, options: { force?: boolean }, command: Command): Promise<void> {
  const config = await serverConfig(command);
  const { url, schema } = config.store;
  if (!url.startsWith('sqlite:')) return leaveToPostgresTools('backup', url, schema, file);
  const store = sqliteFile(url);
  if (!existsSync(store)) throw new UsageError(`there is no Kiln store at ${store}: ${NO_STORE_FIX}`);

  const dest = path.resolve(file);
  if (COMPANIONS.some((suffix) => sameFile(dest, `${store}${suffix}`)) || sameFile(dest, store)) {
    throw new UsageError(`${dest} is part of the store itself; name another file for the backup`);
  }
  if (!statOf(path.dirname(dest))?.isDirectory()) {
    throw new UsageError(`there is no directory ${path.dirname(dest)} to write the backup in`);
  }
  const existing = statOf(dest);
  if (existing?.isDirectory()) {
    throw new UsageError(
      `${dest} is a directory; name the backup file, such as ${path.join(dest, 'kiln-backup.db')}`,
    );
  }
  if (existing && !options.force) throw new UsageError(`${dest} exists already; add --force to replace it`);

  const { backupSqliteStore, checkStoreFile } = await import('../store/sqlite/driver.js');
  const temp = tempBeside(dest);
  const check = await withTemp(temp, async () => {
    try {
      await backupSqliteStore(store, temp);
    } catch (error) {
      if ((error as { code?: string }).code !== 'SQLITE_NOTADB') throw error;
      throw new UsageError(`${store} is not a Kiln store: it is not an SQLite database`);
    }
    const check = checkStoreFile(temp);
    if (!check.ok) throw new UsageError(`the store at ${store} ${problemOf(check)}; no backup was written`);
    replaceDurably(temp, dest);
    return check;
  });

  const size = statSync(dest).size;
  process.stdout.write(
    `wrote ${dest} (${size} bytes, schema version ${check.schemaVersion}): a consistent copy of the SQLite store ${store}\n`,
  );
  const { filesDir } = await import('../files/service.js');
  const files = filesDir(config);
  if (existsSync(files)) {
    process.stdout.write(`produced files are kept apart, in ${files}: copy that directory as well\n`);
  }
}

/**
 * Refuses to replace a store that a gateway, a worker or another command has open (it would go on
 * writing to the file it opened, and lose everything) or, without --force, any existing store.
 */
function refuseToReplace(target: string, force: boolean, inUse: (file: string) => boolean): void {
  if (!existsSync(target)) return;
  if (inUse(target)) {
    throw new UsageError(
      `the store at ${target} is in use (a running kiln serve, kiln worker or other kiln command has it open): stop it, then restore`,
    );
  }
  if (!force) {
    throw new UsageError(
      `there is a Kiln store at ${target} already; add --force to replace it (\`kiln backup <file>\` first if you may want it back)`,
    );
  }
}

/** `kiln restore <file>`: checks a backup and puts it in the place of the configured SQLite store. */
async function restore(file: string, options: { force?: boolean }, command: Command): Promise<void> {
  const config = await serverConfig(command);
  const { url, schema } = config.store;
  if (!url.startsWith('sqlite:')) return leaveToPostgresTools('restore', url, schema, file);
  const target = sqliteFile(url);

  const source = path.resolve(file);
  const stats = statOf(source);
  if (!stats) throw new UsageError(`there is no file at ${source}`);
  if (!stats.isFile()) throw new UsageError(`${source} is not a file`);
  if (stats.size === 0) throw new UsageError(`${source} is not a Kiln store: it is empty`);
  if (sameFile(source, target)) throw new UsageError(`${source} is the configured store itself`);
  if ((statOf(`${source}-wal`)?.size ?? 0) > 0) {
    throw new UsageError(
      `${source} has a write-ahead log beside it (${source}-wal) that holds part of its data: it is a store in use, or copied while in use. Make a backup of it with \`KILN_STORE_URL=sqlite:${source} kiln backup <file>\` and restore that`,
    );
  }

  const { checkStoreFile, sqliteStoreInUse } = await import('../store/sqlite/driver.js');
  const force = options.force === true;
  refuseToReplace(target, force, sqliteStoreInUse);

  // A directory made for a store that then fails its check goes again with the temporary copy.
  const madeDir = mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
  const temp = tempBeside(target);
  const check = await withTemp(temp, async () => {
    // The copy is what gets checked and installed, so nothing can change between the two.
    await pipeline(createReadStream(source), createWriteStream(temp, { flags: 'wx', mode: 0o600 }));
    const check = checkStoreFile(temp);
    if (!check.ok) throw new UsageError(`${source} ${problemOf(check)}; nothing was restored`);
    if (check.schemaVersion > latestVersion()) {
      throw new UsageError(
        `${source} holds a store of schema version ${check.schemaVersion}, newer than this Kiln (${VERSION}) knows (${latestVersion()}): restore it with a Kiln at least as new as the one that wrote it; nothing was restored`,
      );
    }
    // A gateway started while the copy was checked would lose its writes just the same.
    refuseToReplace(target, force, sqliteStoreInUse);
    // The old store's log and journal must go first: SQLite would replay them into the new one.
    for (const suffix of COMPANIONS) rmSync(`${target}${suffix}`, { force: true });
    replaceDurably(temp, target);
    return check;
  }).catch((error: unknown) => {
    if (madeDir && !existsSync(target)) rmSync(madeDir, { recursive: true, force: true });
    throw error;
  });

  const pending =
    check.schemaVersion < latestVersion()
      ? `; kiln serve (or kiln migrate) brings it to schema version ${latestVersion()} when it starts`
      : '';
  process.stdout.write(
    `restored ${target} from ${source} (${statSync(target).size} bytes, schema version ${check.schemaVersion})${pending}\n`,
  );
}

export function backupCommands(program: Command): void {
  program
    .command('backup <file>')
    .description(
      'write a consistent copy of the SQLite store to <file>, while gateways keep serving (PostgreSQL: prints the pg_dump command)',
    )
    .option('--force', 'replace <file> if it exists')
    .action(backup);
  program
    .command('restore <file>')
    .description(
      'replace the SQLite store with a backup, after checking it; no gateway may have the store open (PostgreSQL: prints the pg_restore command)',
    )
    .option('--force', 'replace the store if there is one already')
    .action(restore);
}
