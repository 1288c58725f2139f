import { LeanCounter, LeanHistogram } from './lean.js';

/** What one delivery attempt came to: 2xx, 410 (not retried), a failure to retry, or the last failure. */
export type DeliveryOutcome = 'delivered' | 'gone' | 'retrying' | 'failed';

const deliveries = new LeanCounter(
  'kiln_webhook_deliveries_total',
  'Webhook delivery attempts, by outcome: delivered (2xx), gone (410, not retried), retrying (will be tried again), failed (no tries left).',
  ['outcome'],
);

const duration = new LeanHistogram(
  'kiln_webhook_delivery_duration_seconds',
  'Time a webhook delivery attempt took, until the receiver’s answer or the failure.',
  [],
  [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
);

export function countWebhookDelivery(outcome: DeliveryOutcome, seconds: number): void {
  deliveries.inc(outcome);
  duration.observe(seconds);
}
