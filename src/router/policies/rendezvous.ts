import { createHash } from 'node:crypto';

/**
 * Rendezvous (highest random weight) hashing: every process ranks the replicas for a key the same
 * way, with no shared state, and removing a replica moves only the keys that ranked it first.
 */
export function rendezvousScore(key: string, replica: string): number {
  return createHash('sha1').update(key).update('\u0000').update(replica).digest().readUInt32BE(0);
}
