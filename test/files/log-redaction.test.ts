import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactUrl } from '../../src/api/app.js';
import { loadConfig } from '../../src/config/load.js';
import { type RunningServer, startServer } from '../../src/server.js';
import { makePng } from './media.js';

/**
 * A signed file URL is a credential: whoever holds it can download the file until it expires.
 * No log line, at any level, may contain a valid signature.
 */
describe('signed file URLs in the logs', () => {
  let dir: string;
  let server: RunningServer;
  let adminKey: string;
  const lines: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-log-redaction-'));
    const config = loadConfig({ env: {}, overrides: { data_dir: dir, port: 0 } });
    const capture = new Writable({
      write(chunk, _encoding, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    server = await startServer(config, pino({ level: 'trace' }, capture));
    adminKey = readFileSync(path.join(dir, 'admin.key'), 'utf8').trim();
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs requests for a signed URL without its signature, at every level down to trace', async () => {
    const org = (await server.store.orgs.byName('default'))?.id as string;
    const png = await makePng();
    const file = await server.runtime.files.save({
      orgId: org,
      jobId: null,
      data: png,
      contentType: 'image/png',
    });

    // The URL as a client gets it, from the API.
    const described = await fetch(`${server.url}/v1/files/${file.id}`, {
      headers: { authorization: `Bearer ${adminKey}` },
    });
    const { url } = (await described.json()) as { url: string };
    const signature = new URL(url).searchParams.get('signature') as string;
    expect(signature).toMatch(/^[0-9a-f]{64}$/);

    const got = await fetch(url);
    expect(got.status).toBe(200);
    expect(Buffer.from(await got.arrayBuffer()).equals(png)).toBe(true);
    expect((await fetch(url, { method: 'HEAD' })).status).toBe(200);
    expect((await fetch(url, { headers: { range: 'bytes=0-9' } })).status).toBe(206);
    // Refused variants are logged too: an expired time with the same signature, a mangled parameter name.
    expect((await fetch(url.replace(/expires=\d+/, 'expires=1'))).status).toBe(403);
    expect((await fetch(url.replace('signature=', 'Signature='))).status).toBe(403);
    expect((await fetch(`${url}&signature=${signature}`)).status).toBe(403);
    await new Promise((resolve) => setTimeout(resolve, 50));

    const requestLines = lines.filter((line) => line.includes(`/v1/files/${file.id}/content`));
    // The requests were logged (so the check below is not vacuous), with the parameter redacted.
    expect(requestLines.length).toBeGreaterThanOrEqual(6);
    expect(requestLines.some((line) => line.includes('signature=[redacted]'))).toBe(true);
    expect(server.app.log.level).toBe('trace');
    const leaking = lines.filter((line) => line.includes(signature));
    expect(leaking).toEqual([]);
  });

  it('redacts every credential-like query parameter and keeps the rest of the URL', () => {
    expect(redactUrl('/v1/files/f/content?expires=123&signature=abc')).toBe(
      '/v1/files/f/content?expires=123&signature=[redacted]',
    );
    expect(redactUrl('/x?token=t&access_token=a&api_key=k&sig=s&X-Amz-Signature=z&limit=5')).toBe(
      '/x?token=[redacted]&access_token=[redacted]&api_key=[redacted]&sig=[redacted]&X-Amz-Signature=[redacted]&limit=5',
    );
    // A name spelt with percent-encoding is still recognised.
    expect(redactUrl('/x?sig%6Eature=abc&after=b')).toBe('/x?sig%6Eature=[redacted]&after=b');
    // Parts no route reads as a signature, which a reader could still turn back into a working URL.
    expect(redactUrl('/v1/files/f/content?expires=1&signature%3Dabc')).toBe(
      '/v1/files/f/content?expires=1&[redacted]',
    );
    expect(redactUrl('/v1/files/f/content?expires=1;signature=abc&x=1')).toBe(
      '/v1/files/f/content?expires=1;signature=[redacted]&x=1',
    );
    expect(redactUrl('/x?signature')).toBe('/x?[redacted]');
    expect(redactUrl('/api/v1/contexts?prefix=a&limit=2')).toBe('/api/v1/contexts?prefix=a&limit=2');
    expect(redactUrl('/healthz')).toBe('/healthz');
  });
});
