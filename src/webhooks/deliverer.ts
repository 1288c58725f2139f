import type { Logger } from 'pino';
import { type Agent, request } from 'undici';
import { randomBase62 } from '../ids.js';
import { resignedBody } from '../jobs/present.js';
import { countWebhookDelivery } from '../metrics/webhooks.js';
import { createOutboundAgent } from '../net/http.js';
import type { OutboundPolicy } from '../net/policy.js';
import type { Store, WebhookDelivery } from '../store/index.js';
import { contextOf, errorType, failSpan, inSpan, SpanKind, traceHeaders } from '../telemetry/index.js';
import { VERSION } from '../version.js';
import { signWebhook } from './sign.js';

export interface DeliverySettings {
  /** Delay before each retry, in ms; after the last one the delivery is `failed`. */
  retryScheduleMs: number[];
  timeoutMs: number;
  /** ± share of each delay drawn at random, so receivers coming back are not stampeded. */
  jitter: number;
  pollIntervalMs: number;
  /** A produced file's signed URL, made afresh for each attempt (a retry may come hours later). */
  signUrl?: (fileId: string) => string;
}

/**
 * Delivers the webhook outbox: signed POSTs of the terminal job's poll body, retried on the
 * schedule, stopped by a 410, never following redirects, and only to addresses the outbound
 * policy allows at the moment of connecting. Deliveries are store rows, so they survive restarts.
 */
export class WebhookDeliverer {
  readonly #owner = `webhooks:${process.pid}:${randomBase62(6)}`;
  readonly #agent: Agent;
  #stopping = false;
  #wake: () => void = () => undefined;
  #loop: Promise<void> | undefined;
  #unlisten: (() => Promise<void>) | undefined;

  constructor(
    private readonly store: Store,
    policy: OutboundPolicy,
    private readonly settings: DeliverySettings,
    private readonly log: Logger,
  ) {
    this.#agent = createOutboundAgent(policy, {
      connectTimeout: settings.timeoutMs,
      headersTimeout: settings.timeoutMs,
      bodyTimeout: settings.timeoutMs,
    });
  }

  async start(): Promise<void> {
    this.#unlisten = await this.store.driver.listen('kiln_webhooks', () => this.#wake());
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wake();
    await this.#unlisten?.();
    await this.#loop;
    await this.#agent.close();
  }

  async #run(): Promise<void> {
    while (!this.#stopping) {
      const woken = new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      let sleepMs = this.settings.pollIntervalMs;
      try {
        const now = Date.now();
        const due = await this.store.webhooks.claimDue(
          this.#owner,
          now,
          now + this.settings.timeoutMs * 2 + 5000,
          16,
        );
        await Promise.all(due.map((delivery) => this.#deliver(delivery)));
        if (due.length > 0) continue;
        const next = await this.store.webhooks.nextDueAt();
        if (next !== undefined) sleepMs = Math.max(10, Math.min(sleepMs, next - Date.now()));
      } catch (error) {
        this.log.error({ err: error }, 'webhook delivery loop failed; retrying');
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([woken, new Promise((r) => (timer = setTimeout(r, sleepMs)))]);
      clearTimeout(timer);
    }
  }

  async #deliver(delivery: WebhookDelivery): Promise<void> {
    const log = this.log.child({
      webhook_id: delivery.id,
      job_id: delivery.job_id,
      attempt: delivery.attempts + 1,
    });
    const started = performance.now();
    const { httpStatus, error } = await this.#post(delivery);
    const now = Date.now();
    const seconds = (performance.now() - started) / 1000;
    const ok = httpStatus !== null && httpStatus >= 200 && httpStatus < 300;
    if (ok || httpStatus === 410) {
      countWebhookDelivery(ok ? 'delivered' : 'gone', seconds);
      await this.store.webhooks.recordAttempt(delivery.id, this.#owner, {
        status: ok ? 'delivered' : 'gone',
        httpStatus,
        error,
        next: null,
        now,
      });
      log.info(
        { status: httpStatus },
        ok ? 'webhook delivered' : 'webhook receiver answered 410; not retrying',
      );
      return;
    }
    const delay = this.settings.retryScheduleMs[delivery.attempts];
    const jitter = delay === undefined ? 0 : delay * this.settings.jitter * (Math.random() * 2 - 1);
    countWebhookDelivery(delay === undefined ? 'failed' : 'retrying', seconds);
    await this.store.webhooks.recordAttempt(delivery.id, this.#owner, {
      status: delay === undefined ? 'failed' : 'pending',
      httpStatus,
      error: error ?? `HTTP ${httpStatus}`,
      next: delay === undefined ? null : now + Math.round(delay + jitter),
      now,
    });
    log.warn(
      { status: httpStatus, error },
      delay === undefined ? 'webhook failed for good' : 'webhook attempt failed; will retry',
    );
  }

  /**
   * One signed POST of the delivery: its HTTP status, or why none came. A `webhook` span in the
   * trace of the request that submitted the job, whose context the receiver gets as `traceparent`.
   */
  #post(delivery: WebhookDelivery): Promise<{ httpStatus: number | null; error: string | null }> {
    const parent = contextOf(delivery.traceparent);
    return inSpan('webhook', { kind: SpanKind.CLIENT, parent }, async (span) => {
      // The receiver's host only: a webhook URL's path or query may hold the receiver's token.
      span?.setAttributes({
        'kiln.webhook.id': delivery.id,
        'kiln.webhook.event': delivery.event,
        'kiln.webhook.attempt': delivery.attempts + 1,
        'kiln.job.id': delivery.job_id,
        ...(URL.canParse(delivery.url) ? { 'server.address': new URL(delivery.url).hostname } : {}),
      });
      let httpStatus: number | null = null;
      let error: string | null = null;
      const { signUrl } = this.settings;
      const body = signUrl ? resignedBody(delivery.body, signUrl) : delivery.body;
      try {
        const response = await request(delivery.url, {
          method: 'POST',
          dispatcher: this.#agent,
          headers: {
            ...traceHeaders(),
            'content-type': 'application/json',
            'user-agent': `Kiln-Webhooks/${VERSION}`,
            'x-service-signature': signWebhook(delivery.secret, body),
            'x-service-webhook-id': delivery.id,
            'x-service-event': delivery.event,
          },
          body,
          signal: AbortSignal.timeout(this.settings.timeoutMs),
        });
        httpStatus = response.statusCode;
        await response.body.dump();
      } catch (caught) {
        error = caught instanceof Error ? caught.message : String(caught);
        if (span) failSpan(span, errorType(caught));
      }
      if (span && httpStatus !== null) {
        span.setAttribute('http.response.status_code', httpStatus);
        if (httpStatus < 200 || httpStatus >= 300) failSpan(span, String(httpStatus));
      }
      return { httpStatus, error };
    });
  }
}
