import type { Dialect, SqlDriver } from './driver.js';

/**
 * Append-only, numbered migrations. Never edit one that has shipped: add the next number.
 * Times are BIGINT epoch milliseconds on both databases so the repositories share their SQL.
 */
export const migrations: ReadonlyArray<{ version: number; name: string; sql: (d: Dialect) => string }> = [
  {
    version: 1,
    name: 'orgs, api keys, contexts',
    sql: (d) => `
      CREATE TABLE orgs (
        id TEXT PRIMARY KEY,
        name TEXT ${d.binaryCollation} NOT NULL UNIQUE,
        created_at BIGINT NOT NULL
      );
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        name TEXT,
        tier TEXT NOT NULL CHECK (tier IN ('free', 'standard')),
        role TEXT NOT NULL CHECK (role IN ('member', 'admin')),
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
      );
      CREATE INDEX api_keys_org ON api_keys (org_id);
      CREATE TABLE contexts (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES orgs(id),
        name TEXT ${d.binaryCollation} NOT NULL,
        description TEXT,
        content TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        created_by TEXT NOT NULL,
        UNIQUE (org_id, name)
      );
    `,
  },
];

/** Applies every migration newer than the database, each in its own transaction. Answers how many ran. */
export async function migrate(driver: SqlDriver): Promise<number> {
  await driver.prepareDatabase();
  await driver.exec(
    'CREATE TABLE IF NOT EXISTS kiln_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)',
  );
  let applied = 0;
  for (const migration of migrations) {
    const ran = await driver.transaction(async (tx) => {
      if (driver.dialect.migrationLock) await tx.get(driver.dialect.migrationLock);
      const done = await tx.get('SELECT version FROM kiln_migrations WHERE version = ?', [migration.version]);
      if (done) return false;
      for (const statement of splitStatements(migration.sql(driver.dialect))) await tx.run(statement);
      await tx.run('INSERT INTO kiln_migrations (version, name, applied_at) VALUES (?, ?, ?)', [
        migration.version,
        migration.name,
        Date.now(),
      ]);
      return true;
    });
    if (ran) applied++;
  }
  return applied;
}

/** Kiln's migrations hold plain DDL, so splitting on `;` at line ends is safe. */
function splitStatements(script: string): string[] {
  return script
    .split(/;\s*$/m)
    .map((s) => s.trim())
    .filter(Boolean);
}

export function latestVersion(): number {
  return migrations[migrations.length - 1]?.version ?? 0;
}
