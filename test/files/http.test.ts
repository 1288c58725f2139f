import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installErrorHandling } from '../../src/api/errors.js';
import { fileRoutes } from '../../src/api/files.js';
import { issueKey } from '../../src/auth/keys.js';
import { loadConfig } from '../../src/config/load.js';
import { type FileRecord, FileService } from '../../src/files/service.js';
import { openStore, type Store } from '../../src/store/index.js';
import { makePng, makeWebm } from './media.js';

/** GET /v1/files/{id}/content and GET /v1/files/{id} over real HTTP (SQLite store). */
describe('files over HTTP', () => {
  let dir: string;
  let store: Store;
  let files: FileService;
  let app: FastifyInstance;
  let base: string;
  let ownerKey: string;
  let outsiderKey: string;
  let webm: Buffer;
  let video: FileRecord;
  let empty: FileRecord;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'kiln-files-http-'));
    const config = loadConfig({ env: {}, overrides: { data_dir: dir } });
    store = openStore(config.store);
    await store.migrate();
    const acme = (await store.orgs.create('acme'))?.id as string;
    const globex = (await store.orgs.create('globex'))?.id as string;
    ownerKey = (await issueKey(store, { orgId: acme })).key;
    outsiderKey = (await issueKey(store, { orgId: globex })).key;

    app = Fastify();
    installErrorHandling(app);
    files = await FileService.create(store, config, () => base);
    fileRoutes(app, { files, store });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;

    webm = await makeWebm(dir);
    video = await files.save({ orgId: acme, jobId: 'job_1', data: webm, contentType: 'video/webm' });
    empty = await files.save({ orgId: acme, jobId: null, data: Buffer.alloc(0), contentType: 'text/plain' });
  });
  afterAll(async () => {
    await app?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const content = (id = video.id) => `${base}/v1/files/${id}/content`;
  const bearer = (key: string, extra: Record<string, string> = {}) => ({
    headers: { authorization: `Bearer ${key}`, ...extra },
  });
  /** fetch that always reads the whole body, so no connection is left busy when the server closes. */
  const call = async (url: string | URL, init: RequestInit = {}) => {
    const response = await fetch(url, init);
    const body = Buffer.from(await response.arrayBuffer());
    return {
      status: response.status,
      headers: response.headers,
      body,
      json: () => JSON.parse(body.toString()),
    };
  };

  it('serves the bytes to a key of the owning organisation', async () => {
    const response = await call(content(), bearer(ownerKey));
    expect(response.status).toBe(200);
    expect(response.body.equals(webm)).toBe(true);
    expect(response.headers.get('content-type')).toBe('video/webm');
    expect(response.headers.get('content-length')).toBe(String(webm.length));
    expect(response.headers.get('accept-ranges')).toBe('bytes');
    expect(response.headers.get('etag')).toBe(`"${video.sha256}"`);
    expect(response.headers.get('cache-control')).toMatch(/^private\b/);
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
    expect(response.headers.get('content-disposition')).toBe(`inline; filename="${video.id}.webm"`);
  });

  it('serves the bytes to anyone with the signed URL, no key needed', async () => {
    const response = await call(files.signedUrl(video));
    expect(response.status).toBe(200);
    expect(response.body.equals(webm)).toBe(true);
    expect(response.headers.get('cache-control')).toMatch(/^private, max-age=(8639\d|86400)$/);
    // A key of another organisation does not spoil a valid signature.
    const withKey = await call(files.signedUrl(video), bearer(outsiderKey));
    expect(withKey.status).toBe(200);
  });

  it("answers 404 to another organisation's key, the same as for an unknown file", async () => {
    for (const url of [content(), content('file_0123456789abcdef0123456789abcdef'), content('nope')]) {
      const response = await call(url, bearer(outsiderKey));
      expect(response.status).toBe(404);
      expect(response.json().error).toMatchObject({ code: 'not-found', type: 'not_found_error' });
    }
  });

  it('asks for a key when there is neither a key nor a signature', async () => {
    const response = await call(content());
    expect(response.status).toBe(401);
    expect(response.json().error.code).toBe('unauthorized');
    expect((await call(content(), bearer('kiln_sk_not-a-key'))).status).toBe(401);
  });

  it('refuses a tampered signature with 403, not 500', async () => {
    const url = new URL(files.signedUrl(video));
    const signature = url.searchParams.get('signature') as string;
    url.searchParams.set('signature', `${signature.slice(0, -1)}${signature.endsWith('0') ? '1' : '0'}`);
    for (const tampered of [
      url.toString(),
      `${content()}?expires=${url.searchParams.get('expires')}`,
      `${content()}?expires=soon&signature=zz`,
      // a genuine signature moved to another file
      `${content(empty.id)}${new URL(files.signedUrl(video)).search}`,
    ]) {
      const response = await call(tampered);
      expect(response.status).toBe(403);
      const body = response.json();
      expect(body.error).toMatchObject({ code: 'forbidden', type: 'permission_error' });
      expect(body.error.message).toMatch(/signature/);
    }
    // With the owner's key, the key alone decides.
    expect((await call(url, bearer(ownerKey))).status).toBe(200);
  });

  it('refuses an expired signed URL with 403 saying it expired', async () => {
    const response = await call(files.signedUrl(video, -60_000));
    expect(response.status).toBe(403);
    const body = response.json();
    expect(body.error.code).toBe('forbidden');
    expect(body.error.message).toMatch(/expired/);
  });

  it('answers a byte range with 206 and Content-Range', async () => {
    const response = await call(files.signedUrl(video), { headers: { range: 'bytes=0-99' } });
    expect(response.status).toBe(206);
    expect(response.headers.get('content-range')).toBe(`bytes 0-99/${webm.length}`);
    expect(response.headers.get('content-length')).toBe('100');
    expect(response.body.equals(webm.subarray(0, 100))).toBe(true);

    const middle = await call(content(), bearer(ownerKey, { range: 'bytes=1000-1999' }));
    expect(middle.status).toBe(206);
    expect(middle.body.equals(webm.subarray(1000, 2000))).toBe(true);
  });

  it('answers a suffix range with the last bytes and an open range to the end', async () => {
    const suffix = await call(content(), bearer(ownerKey, { range: 'bytes=-50' }));
    expect(suffix.status).toBe(206);
    expect(suffix.headers.get('content-range')).toBe(
      `bytes ${webm.length - 50}-${webm.length - 1}/${webm.length}`,
    );
    expect(suffix.body.equals(webm.subarray(-50))).toBe(true);

    const tail = await call(content(), bearer(ownerKey, { range: `bytes=${webm.length - 10}-` }));
    expect(tail.status).toBe(206);
    expect(tail.body.equals(webm.subarray(-10))).toBe(true);

    const past = await call(content(), bearer(ownerKey, { range: 'bytes=0-99999999' }));
    expect(past.status).toBe(206);
    expect(past.headers.get('content-range')).toBe(`bytes 0-${webm.length - 1}/${webm.length}`);
    expect(past.body.equals(webm)).toBe(true);
  });

  it('answers 416 with bytes */size to a range past the end', async () => {
    for (const range of ['bytes=1000000-', 'bytes=-0', `bytes=${webm.length}-${webm.length + 5}`]) {
      const response = await call(content(), bearer(ownerKey, { range }));
      expect(response.status).toBe(416);
      expect(response.headers.get('content-range')).toBe(`bytes */${webm.length}`);
      expect(response.json().error.code).toBe('range-not-satisfiable');
    }
  });

  it('answers several ranges, or a range it cannot read, with the whole file', async () => {
    for (const range of ['bytes=0-9,20-29', 'bytes=9-0', 'lines=1-2', 'bytes=abc']) {
      const response = await call(content(), bearer(ownerKey, { range }));
      expect(response.status).toBe(200);
      expect(response.body.length).toBe(webm.length);
    }
    const stale = await call(content(), bearer(ownerKey, { range: 'bytes=0-9', 'if-range': '"other"' }));
    expect(stale.status).toBe(200);
    const fresh = await call(
      content(),
      bearer(ownerKey, { range: 'bytes=0-9', 'if-range': `"${video.sha256}"` }),
    );
    expect(fresh.status).toBe(206);
  });

  it('answers 304 when the client already has this version', async () => {
    const response = await call(content(), bearer(ownerKey, { 'if-none-match': `"${video.sha256}"` }));
    expect(response.status).toBe(304);
    expect(response.headers.get('etag')).toBe(`"${video.sha256}"`);
  });

  it('answers HEAD with the headers and no body', async () => {
    const whole = await call(files.signedUrl(video), { method: 'HEAD' });
    expect(whole.status).toBe(200);
    expect(whole.headers.get('content-length')).toBe(String(webm.length));
    expect(whole.headers.get('content-type')).toBe('video/webm');
    expect(whole.body.length).toBe(0);

    const part = await call(content(), { method: 'HEAD', ...bearer(ownerKey, { range: 'bytes=-50' }) });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-length')).toBe('50');
    expect(part.headers.get('content-range')).toBe(
      `bytes ${webm.length - 50}-${webm.length - 1}/${webm.length}`,
    );

    expect((await call(content(), { method: 'HEAD', ...bearer(outsiderKey) })).status).toBe(404);
    expect((await call(files.signedUrl(video, -1000), { method: 'HEAD' })).status).toBe(403);
  });

  it('serves an empty file, whose every range is unsatisfiable', async () => {
    const response = await call(content(empty.id), bearer(ownerKey));
    expect(response.status).toBe(200);
    expect(response.headers.get('content-length')).toBe('0');
    expect(response.body.length).toBe(0);
    const ranged = await call(content(empty.id), bearer(ownerKey, { range: 'bytes=0-' }));
    expect(ranged.status).toBe(416);
    expect(ranged.headers.get('content-range')).toBe('bytes */0');
  });

  it('describes a file to its organisation, with a fresh signed URL that works', async () => {
    const response = await call(`${base}/v1/files/${video.id}`, bearer(ownerKey));
    expect(response.status).toBe(200);
    const record = response.json();
    expect(record).toEqual({
      ...video,
      url: expect.stringContaining(`${base}/v1/files/${video.id}/content?`),
    });
    expect(record.width).toBe(320);
    const download = await call(record.url);
    expect(download.status).toBe(200);
    expect(download.body.equals(webm)).toBe(true);

    expect((await call(`${base}/v1/files/${video.id}`, bearer(outsiderKey))).status).toBe(404);
    expect((await call(`${base}/v1/files/${video.id}`)).status).toBe(401);
    // A signature is for the content only, not for the record.
    const signed = new URL(files.signedUrl(video)).search;
    expect((await call(`${base}/v1/files/${video.id}${signed}`)).status).toBe(401);
  });

  it('answers 404, not a broken response, when the stored bytes are gone', async () => {
    const png = await files.save({
      orgId: (await store.orgs.byName('acme'))?.id as string,
      jobId: null,
      data: await makePng(),
      contentType: 'image/png',
    });
    await files.storage.delete((await store.files.find(png.id))?.storage_key as string);
    const response = await call(files.signedUrl(png));
    expect(response.status).toBe(404);
    expect(response.json().error.code).toBe('not-found');
    // Nothing invites a cache to keep the error.
    expect(response.headers.get('etag')).toBeNull();
    expect(response.headers.get('cache-control')).toBeNull();
    expect((await call(files.signedUrl(png), { method: 'HEAD' })).status).toBe(404);
  });
});
