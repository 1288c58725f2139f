import type { Logger } from 'pino';
import { type Config, parseDuration } from './config/schema.js';
import { type JobKind, KindRegistry } from './jobs/kinds.js';
import { JobService } from './jobs/service.js';
import { Sweeper } from './jobs/sweeper.js';
import { Worker } from './jobs/worker.js';
import { createOutboundPolicy, type OutboundPolicy } from './net/policy.js';
import { openStore, type Store } from './store/index.js';
import { WebhookDeliverer } from './webhooks/deliverer.js';

/** Everything a Kiln process runs besides HTTP: the store, the job service and its background loops. */
export interface Runtime {
  config: Config;
  store: Store;
  jobs: JobService;
  policy: OutboundPolicy;
  /** Starts workers, the sweeper and webhook delivery (when `jobs.workers` > 0). */
  startBackground(): Promise<void>;
  /** Stops the loops (running jobs go back to the queue), then closes the store. */
  close(): Promise<void>;
}

/** Opens and migrates the store and wires the job machinery for these kinds. */
export async function createRuntime(
  config: Config,
  logger: Logger,
  kinds: Iterable<JobKind<never, unknown>>,
): Promise<Runtime> {
  const store = openStore(config.store);
  try {
    const applied = await store.migrate();
    if (applied > 0) logger.info({ applied, store: store.dialect }, 'store migrated');
  } catch (error) {
    await store.close().catch(() => undefined);
    throw error;
  }
  const policy = createOutboundPolicy(config.security);
  const jobs = new JobService(store, new KindRegistry(kinds), {
    retentionMs: parseDuration(config.jobs.retention),
    maxAttempts: config.jobs.max_attempts,
  });
  await jobs.start();

  const leaseMs = config.jobs.lease_seconds * 1000;
  const background: Array<{ stop(): unknown }> = [];
  return {
    config,
    store,
    jobs,
    policy,
    async startBackground() {
      if (config.jobs.workers === 0) return;
      const worker = new Worker(
        jobs,
        { concurrency: config.jobs.workers, leaseMs, pollIntervalMs: config.jobs.poll_interval_ms },
        logger.child({ component: 'worker' }),
      );
      const sweeper = new Sweeper(
        jobs,
        Math.max(100, Math.floor(leaseMs / 4)),
        logger.child({ component: 'sweeper' }),
      );
      const deliverer = new WebhookDeliverer(
        store,
        policy,
        {
          retryScheduleMs: config.webhooks.retry_schedule.map(parseDuration),
          timeoutMs: parseDuration(config.webhooks.timeout),
          jitter: config.webhooks.jitter,
          pollIntervalMs: config.jobs.poll_interval_ms,
        },
        logger.child({ component: 'webhooks' }),
      );
      await worker.start();
      sweeper.start();
      await sweeper.sweep();
      await deliverer.start();
      background.push(worker, sweeper, deliverer);
    },
    async close() {
      for (const part of background.reverse()) await part.stop();
      await jobs.stop();
      await store.close();
    },
  };
}
