import { hash } from 'node:crypto';
import { randomBase62 } from '../ids.js';
import type { Limits } from '../limits/schema.js';
import type { Store } from '../store/index.js';
import type { ApiKey, Role, Tier } from '../store/types.js';

export const KEY_PREFIX = 'kiln_sk_';

/** Keys are stored only as this hash; the key itself is shown once, when it is created. */
export function hashKey(key: string): string {
  return hash('sha256', key, 'hex');
}

/** Creates a key for the organisation and answers the record with the plain key, which is never stored. */
export async function issueKey(
  store: Store,
  options: { orgId: string; tier?: Tier; role?: Role; name?: string | null; limits?: Limits },
): Promise<{ key: string; record: ApiKey }> {
  const key = `${KEY_PREFIX}${randomBase62(32)}`;
  const record = await store.keys.create({
    orgId: options.orgId,
    hash: hashKey(key),
    prefix: key.slice(0, KEY_PREFIX.length + 4),
    name: options.name ?? null,
    tier: options.tier ?? 'standard',
    role: options.role ?? 'member',
    ...(options.limits ? { limits: options.limits } : {}),
  });
  return { key, record };
}

/** The key behind an `Authorization: Bearer …` value, or undefined when it is not a live key. */
export async function authenticate(store: Store, key: string): Promise<ApiKey | undefined> {
  if (!key.startsWith(KEY_PREFIX) || key.length > 128) return undefined;
  return store.liveKeys.find(hashKey(key));
}
