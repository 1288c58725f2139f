import type { SqlDriver } from '../store/driver.js';
import type { ApiKey } from '../store/types.js';

/** The longest a key is trusted without a lookup: the bound on staleness should a notification be lost. */
const TRUST_MS = 10_000;
/** More keys than this in use at once, and the cache starts over rather than grow. */
const MAX_KEYS = 10_000;

/**
 * Live keys by hash, so an authenticated request costs no store lookup. A revocation empties it at
 * once: in this process directly (`clear`), in other processes through the store's `kiln_keys`
 * notification, and on SQLite — whose admin CLI is a process of its own, without notifications —
 * whenever another connection has committed to the database. Unknown and revoked keys are never
 * cached, so they cost a lookup each time, as before.
 */
export class KeyCache {
  readonly #keys = new Map<string, { key: ApiKey; until: number }>();
  /** Moves on every `clear`, so a lookup that raced a revocation is not cached. */
  #generation = 0;
  #externalVersion: number | undefined;
  /** Set once the notification channel is listened to; until then nothing is cached. */
  #listening = false;
  #subscribing: Promise<unknown> | undefined;

  constructor(
    private readonly driver: SqlDriver,
    private readonly lookup: (hash: string) => Promise<ApiKey | undefined>,
  ) {}

  clear(): void {
    this.#keys.clear();
    this.#generation++;
  }

  /** The live key with this hash, or undefined. */
  async find(hash: string): Promise<ApiKey | undefined> {
    this.#subscribing ??= this.driver
      .listen('kiln_keys', () => this.clear())
      .then(
        () => {
          this.#listening = true;
        },
        () => undefined,
      );
    const external = this.driver.externalVersion?.();
    if (external !== this.#externalVersion) {
      this.clear();
      this.#externalVersion = external;
    }
    // While notifications cannot arrive, a revocation could go unheard: nothing is trusted or kept.
    if (this.driver.listenerUp?.() === false) {
      this.clear();
      return this.lookup(hash);
    }
    const now = Date.now();
    const hit = this.#keys.get(hash);
    if (hit && hit.until > now) return hit.key;
    const generation = this.#generation;
    const key = await this.lookup(hash);
    if (!key || !this.#listening || generation !== this.#generation) return key;
    if (this.#keys.size >= MAX_KEYS) this.clear();
    this.#keys.set(hash, { key, until: now + TRUST_MS });
    return key;
  }
}
