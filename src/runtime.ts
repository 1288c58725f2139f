import type { Logger } from 'pino';
import { chatKind } from './chat/kind.js';
import { loadConfig } from './config/load.js';
import { type Config, parseDuration } from './config/schema.js';
import { RunnerPool } from './engines/comfyui/runners.js';
import { loadTemplates, type WorkflowTemplate } from './engines/comfyui/workflows.js';
import { FileService } from './files/service.js';
import { type JobKind, KindRegistry } from './jobs/kinds.js';
import { JobService } from './jobs/service.js';
import { Sweeper } from './jobs/sweeper.js';
import { Worker } from './jobs/worker.js';
import { Limiter } from './limits/admission.js';
import { mediaKinds } from './media/kinds.js';
import { createOutboundPolicy, type OutboundPolicy } from './net/policy.js';
import { responseKind } from './responses/kind.js';
import { Purger } from './retention/purge.js';
import { Router, RoutingMemory } from './router/index.js';
import { openStore, type Store } from './store/index.js';
import { newerStoreProblem } from './store/migrations.js';
import { startTelemetry } from './telemetry/index.js';
import { WebhookDeliverer } from './webhooks/deliverer.js';

/** Everything a Kiln process runs besides HTTP: the store, the router, the job service and its loops. */
export interface Runtime {
  config: Config;
  store: Store;
  jobs: JobService;
  /** Rate limits and budgets: admission counts, tier defaults. */
  limiter: Limiter;
  policy: OutboundPolicy;
  files: FileService;
  /** Workflow templates by model, and the ComfyUI runners that run them. */
  templates: Map<string, WorkflowTemplate>;
  runners: RunnerPool;
  /** The router in force; `reload` replaces it. */
  router(): Router;
  /** The address clients reach this gateway at, once it listens (for signed file URLs). */
  setPublicUrl(url: string): void;
  /**
   * Re-reads the configuration file and swaps in a router for its engines, personas and routing, and
   * the ComfyUI runners (a removed one finishes the prompts it has),
   * without dropping requests in flight. Other keys need a restart. Throws ConfigError on a bad file.
   */
  reload(): Promise<void>;
  /** Starts workers, the sweeper and webhook delivery (when `jobs.workers` > 0). */
  startBackground(): Promise<void>;
  /**
   * The first half of a graceful stop: this process takes no more queued jobs, and the jobs it runs
   * get until `deadline` (epoch ms) to finish. `close` then hands back whatever still runs.
   */
  drain(deadline: number): Promise<void>;
  /** Stops the loops (running jobs go back to the queue), closes the store, then flushes traces. */
  close(): Promise<void>;
}

/** Opens and migrates the store and wires the job machinery: the built-in kinds plus `extraKinds`. */
export async function createRuntime(
  config: Config & { configFile?: string | undefined },
  logger: Logger,
  extraKinds: Iterable<JobKind<never, unknown>> = [],
): Promise<Runtime> {
  // Before anything opens: a policy the configuration cannot make leaves nothing running.
  const policy = createOutboundPolicy(config.security);
  const store = openStore(config.store);
  try {
    const applied = await store.migrate();
    if (applied > 0) logger.info({ applied, store: store.dialect }, 'store migrated');
    // Served all the same: while gateways roll to a new release, the old ones restart on its schema.
    const newer = newerStoreProblem(await store.schemaVersion());
    if (newer)
      logger.warn(
        { store: store.dialect },
        `${newer}: serving it, as during a rolling upgrade; only do so if that release's notes say its schema works with older code`,
      );
  } catch (error) {
    await store.close().catch(() => undefined);
    throw error;
  }
  // Before anything that makes spans: the workers, webhook delivery and (later) the HTTP server.
  const telemetry = await startTelemetry(config.telemetry, logger.child({ component: 'telemetry' }));
  // What routing learns outlives reloads, and travels between gateways that share a PostgreSQL store.
  const memory = new RoutingMemory(store.driver, logger.child({ component: 'router' }));
  await memory.start();
  let router = new Router(config, logger.child({ component: 'router' }), memory);
  router.start();
  // Until the server listens, file URLs use the configured address (kiln worker never listens).
  let publicUrl = config.public_url || `http://${config.host}:${config.port}`;
  const files = await FileService.create(store, config, () => publicUrl);
  const templates = loadTemplates();
  const runners = new RunnerPool(config.runners, logger.child({ component: 'runners' }));
  runners.startHealthChecks();
  const images = { policy, maxBytes: config.files.max_input_bytes };
  const kinds = new KindRegistry([
    chatKind({ router: () => router, store, images }) as JobKind<never, unknown>,
    responseKind({ router: () => router, store, images }) as JobKind<never, unknown>,
    ...mediaKinds({ templates, runners, files, policy, maxInputBytes: config.files.max_input_bytes }),
    ...extraKinds,
  ]);
  const limiter = new Limiter(config.limits);
  const jobs = new JobService(
    store,
    kinds,
    {
      retentionMs: parseDuration(config.jobs.retention),
      maxAttempts: config.jobs.max_attempts,
      signUrl: (fileId) => files.signedUrl({ id: fileId }),
    },
    limiter,
  );
  await jobs.start();

  const leaseMs = config.jobs.lease_seconds * 1000;
  const background: Array<{ stop(): unknown }> = [];
  let worker: Worker | undefined;
  return {
    config,
    store,
    jobs,
    limiter,
    policy,
    files,
    templates,
    runners,
    router: () => router,
    setPublicUrl(url) {
      if (!config.public_url) publicUrl = url;
    },
    async reload() {
      const next = loadConfig({ file: config.configFile, refuseEmpty: true });
      const fresh = new Router(next, logger.child({ component: 'router' }), memory);
      fresh.start();
      const old = router;
      router = fresh;
      limiter.configure(next.limits);
      runners.reconfigure(next.runners);
      logger.info(
        {
          engines: Object.keys(next.engines),
          personas: Object.keys(next.personas),
          runners: Object.keys(next.runners),
        },
        'configuration reloaded: new requests use the new routing',
      );
      void old.retire();
    },
    async startBackground() {
      if (config.jobs.workers === 0) return;
      worker = new Worker(
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
          signUrl: (fileId) => files.signedUrl({ id: fileId }),
        },
        logger.child({ component: 'webhooks' }),
      );
      await worker.start();
      jobs.attachLocalWorker(worker);
      sweeper.start();
      await sweeper.sweep();
      await deliverer.start();
      const purger = new Purger(
        store,
        files,
        {
          intervalMs: parseDuration(config.jobs.purge_interval),
          deliveriesKeptMs: parseDuration(config.webhooks.retention),
          jobsKeptMs: parseDuration(config.jobs.retention),
        },
        logger.child({ component: 'purge' }),
      );
      purger.start();
      background.push(worker, sweeper, deliverer, purger);
    },
    async drain(deadline) {
      await worker?.drain(deadline);
    },
    async close() {
      jobs.attachLocalWorker(undefined);
      for (const part of background.reverse()) await part.stop();
      await jobs.stop();
      runners.stop();
      await router.retire(5000);
      await memory.stop();
      await store.close();
      await telemetry.shutdown();
    },
  };
}
