import type { Logger } from 'pino';
import type { ModelTraits } from '../engines/index.js';
import type { SqlDriver } from '../store/index.js';
import { PrefixIndex } from './prefix-index.js';
import { TokenCalibration } from './tokens.js';

/** NOTIFY payloads stay under PostgreSQL's 8000-byte limit. */
const MAX_PAYLOAD = 7000;
/** How long choices gather before they go out together: short, so other gateways learn in time. */
const FLUSH_MS = 5;

type Touch = [url: string, capacityBlocks: number, chain: readonly string[]];

const ORIGIN = `${process.pid}:${Math.random().toString(36).slice(2)}`;

/**
 * What routing learns and keeps across reloads: the prefix index of every replica, the
 * characters-per-token of every model and what each engine said of its model. Where gateway processes share a store (PostgreSQL), every
 * choice is told to the others over its notification channel, so they all hold the same index
 * and send a prefix where any of them sent it before.
 */
export class RoutingMemory {
  readonly index = new PrefixIndex();
  readonly calibration = new TokenCalibration();
  /** What each replica's engine said of its model, by URL, so that a reload need not ask again. */
  readonly traits = new Map<string, ModelTraits>();
  #pending: Touch[] = [];
  #timer: NodeJS.Timeout | undefined;
  #unlisten: (() => Promise<void>) | undefined;

  constructor(
    private readonly driver: SqlDriver | undefined,
    private readonly log?: Logger,
  ) {}

  /** True when other processes hear this one's choices. */
  get shared(): boolean {
    return this.driver?.dialect.sharedAcrossProcesses === true;
  }

  async start(): Promise<void> {
    if (!this.driver || !this.shared) return;
    this.#unlisten = await this.driver.listen('kiln_routing', (payload) => this.#receive(payload));
  }

  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#flush();
    await this.#unlisten?.();
  }

  /** Tells the other gateways that the replica at `url` now holds `chain`. */
  share(url: string, chain: readonly string[], capacityBlocks: number): void {
    if (!this.shared || chain.length === 0) return;
    this.#pending.push([url, capacityBlocks, chain]);
    this.#timer ??= setTimeout(() => this.#flush(), FLUSH_MS);
  }

  #flush(): void {
    this.#timer = undefined;
    const touches = this.#pending;
    this.#pending = [];
    let batch: Touch[] = [];
    let size = 0;
    const send = () => {
      if (batch.length === 0) return;
      const payload = JSON.stringify({ o: ORIGIN, t: batch });
      batch = [];
      size = 0;
      // Best effort: a lost message costs another gateway a cache miss, never a wrong answer.
      this.driver?.notify('kiln_routing', payload).catch((error: unknown) => {
        this.log?.debug({ err: (error as Error).message }, 'routing index not shared');
      });
    };
    for (const touch of touches) {
      // A chain longer than one message can carry is cut: its leading blocks matter most.
      const room = Math.floor((MAX_PAYLOAD - 200 - touch[0].length) / 19);
      const chain = touch[2].length > room ? touch[2].slice(0, room) : touch[2];
      const cost = touch[0].length + chain.length * 19 + 30;
      if (size + cost > MAX_PAYLOAD) send();
      batch.push([touch[0], touch[1], chain]);
      size += cost;
    }
    send();
  }

  #receive(payload: string): void {
    let message: { o?: unknown; t?: unknown };
    try {
      message = JSON.parse(payload) as typeof message;
    } catch {
      return;
    }
    if (message.o === ORIGIN || !Array.isArray(message.t)) return;
    for (const touch of message.t as unknown[]) {
      if (!Array.isArray(touch)) continue;
      const [url, capacity, chain] = touch as [unknown, unknown, unknown];
      if (typeof url !== 'string' || typeof capacity !== 'number' || !Array.isArray(chain)) continue;
      if (!chain.every((key) => typeof key === 'string')) continue;
      this.index.replica(url, capacity).touch(chain as string[], this.index.nextTick());
    }
  }
}
