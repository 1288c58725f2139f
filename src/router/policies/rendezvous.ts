import { hash } from 'node:crypto';

/**
 * Rendezvous (highest random weight) hashing: every process ranks the replicas for a key the same
 * way, with no shared state, and removing a replica moves only the keys that ranked it first.
 */
export function rendezvousScore(key: string, replica: string): number {
  return hash('sha1', `${key}\u0000${replica}`, 'buffer').readUInt32BE(0);
}
