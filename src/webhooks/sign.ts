import { createHmac } from 'node:crypto';

/** `v1` of X-Service-Signature: hex HMAC-SHA256 of "<t>.<body>" under the secret. */
export function webhookSignature(secret: string, timestamp: number, body: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

/** The X-Service-Signature header value for a body sent at `timestamp` (Unix seconds). */
export function signWebhook(secret: string, body: string, timestamp = Math.floor(Date.now() / 1000)): string {
  return `t=${timestamp},v1=${webhookSignature(secret, timestamp, body)}`;
}
