import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Store } from '../store/index.js';
import { issueKey } from './keys.js';

export const DEFAULT_ORG = 'default';

/**
 * First start on an empty store: organisation `default` and one admin key, written to
 * `<data dir>/admin.key` with mode 0600. Answers the file's path, or undefined when the store
 * already had organisations. Two processes starting at once create one org: the name is unique.
 */
export async function bootstrapStore(store: Store, dataDir: string): Promise<string | undefined> {
  if ((await store.orgs.count()) > 0) return undefined;
  const org = await store.orgs.create(DEFAULT_ORG);
  if (!org) return undefined;
  const { key } = await issueKey(store, { orgId: org.id, role: 'admin', name: 'bootstrap admin' });
  const file = path.join(dataDir, 'admin.key');
  // It holds the admin key (and, on SQLite, the database): nobody else's to read.
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await writeFile(file, `${key}\n`, { mode: 0o600 });
  return file;
}
