import { timingSafeEqual } from 'node:crypto';
import { webhookSignature } from '../webhooks/sign.js';

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderBag, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name);
  const value = key === undefined ? undefined : headers[key];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * True when a webhook request really comes from Kiln: its X-Service-Signature is the HMAC of this
 * exact raw body under `secret`, signed within `toleranceSeconds` of now (replays are refused).
 * Verify the raw bytes received, before any JSON parsing.
 */
export function verifyWebhook(
  secret: string,
  headers: HeaderBag,
  rawBody: string | Buffer,
  toleranceSeconds = 300,
  now = Date.now(),
): boolean {
  const signature = header(headers, 'x-service-signature');
  if (!signature) return false;
  const parts = signature.split(',').map((p) => p.trim().split('='));
  const timestamp = Number(parts.find(([k]) => k === 't')?.[1]);
  if (!Number.isInteger(timestamp) || Math.abs(now / 1000 - timestamp) > toleranceSeconds) return false;
  const expected = Buffer.from(webhookSignature(secret, timestamp, rawBody.toString()), 'hex');
  return (
    parts
      .filter(([k]) => k === 'v1')
      // Exactly 64 lower-case hex digits: Buffer.from(…, 'hex') would quietly ignore trailing junk.
      .some(
        ([, v]) =>
          /^[0-9a-f]{64}$/.test(v ?? '') && timingSafeEqual(Buffer.from(v as string, 'hex'), expected),
      )
  );
}
