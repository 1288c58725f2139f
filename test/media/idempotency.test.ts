import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * An Idempotency-Key on a media submission that leaves `seed` out: Kiln draws the seed, and the
 * same body sent again with the same key must still be the same job (DESIGN: "same organisation +
 * same key + same canonical body … returns the first answer again"), with the seed it first drew.
 */
for (const store of storeCases) {
  describe.skipIf(store.skip)(`Idempotency-Key on media jobs without a seed (${store.name})`, () => {
    let kiln: TestServer;
    let sim: ComfySim;
    let image: string;
    let key = 0;

    beforeAll(async () => {
      sim = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 5, steps: 4 });
      kiln = await startTestServer(store, {
        runners: { gpu: { url: sim.url, models: ['ltx-video', 'sdxl'] } },
        'jobs.poll_interval_ms': 50,
      });
      const png = await sharp({ create: { width: 256, height: 256, channels: 3, background: '#336699' } })
        .png()
        .toBuffer();
      image = `data:image/png;base64,${png.toString('base64')}`;
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await sim?.close();
    });

    const jobsOfKind = async (kind: string) =>
      (await kiln.call('GET', `/v1/jobs?kind=${kind}&limit=100`)).body.data.length as number;

    const asyncCases = () =>
      [
        [
          'video.transition',
          '/v1/videos/transitions',
          { start_image: image, size: '512x512', duration_seconds: 1 },
        ],
        ['video.generation', '/v1/videos/generations', { image, size: '512x512', duration_seconds: 1 }],
        ['image.generation', '/v1/images/generations', { mode: 'async', size: '512x512' }],
      ] as const;

    it('an async submission sent twice is one job, answered twice with the seed first drawn', async () => {
      for (const [kind, path, body] of asyncCases()) {
        const headers = { 'idempotency-key': `media-${++key}` };
        const before = await jobsOfKind(kind);
        const first = await kiln.call('POST', path, { body: { ...body, prompt: 'a kiln' }, headers });
        expect(first.status, JSON.stringify(first.body)).toBe(202);
        expect(first.body.seed, kind).toEqual(expect.any(Number));
        const again = await kiln.call('POST', path, { body: { ...body, prompt: 'a kiln' }, headers });
        expect(again.status, JSON.stringify(again.body)).toBe(202);
        expect(again.headers.get('idempotent-replayed'), kind).toBe('true');
        expect(again.body, kind).toEqual(first.body);
        expect(await jobsOfKind(kind), kind).toBe(before + 1);

        // Another body under the same key is refused, and makes no job.
        const other = await kiln.call('POST', path, { body: { ...body, prompt: 'a pot' }, headers });
        expect([other.status, other.body.error?.code], kind).toEqual([422, 'idempotency-key-reused']);
        expect(await jobsOfKind(kind), kind).toBe(before + 1);
      }
    }, 60_000);

    it('a sync image request sent again after it finished answers the first images, without another job', async () => {
      const headers = { 'idempotency-key': `media-${++key}` };
      const body = { prompt: 'a kiln at dusk', size: '512x512', response_format: 'b64_json' };
      const before = await jobsOfKind('image.generation');
      const first = await kiln.call('POST', '/v1/images/generations', { body, headers });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      const again = await kiln.call('POST', '/v1/images/generations', { body, headers });
      expect(again.status, JSON.stringify(again.body)).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body.data[0].b64_json).toBe(first.body.data[0].b64_json);
      expect(await jobsOfKind('image.generation')).toBe(before + 1);
    }, 60_000);

    it('a sync image replayed later answers its URL signed afresh, as a poll does, not the one first sent', async () => {
      const headers = { 'idempotency-key': `media-${++key}` };
      const body = { prompt: 'a kiln at dawn', size: '512x512' };
      const first = await kiln.call('POST', '/v1/images/generations', { body, headers });
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      const expiry = (url: string) => Number(new URL(url, kiln.url).searchParams.get('expires'));
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const again = await kiln.call('POST', '/v1/images/generations', { body, headers });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body.data[0].file_id).toBe(first.body.data[0].file_id);
      expect(expiry(again.body.data[0].url)).toBeGreaterThan(expiry(first.body.data[0].url));
      expect((await fetch(new URL(again.body.data[0].url, kiln.url))).status).toBe(200);
    }, 60_000);

    it("a free key's transition is held to ltx-video: the same key and body from a standard key of the org is another request", async () => {
      const headers = { 'idempotency-key': `media-${++key}` };
      const body = { start_image: image, size: '512x512', duration_seconds: 1, prompt: 'a kiln', seed: 3 };
      const free = await kiln.call('POST', '/v1/videos/transitions', {
        body: { ...body, model: 'wan-2.2' },
        headers,
        key: await kiln.key('media-tiers', { tier: 'free' }),
      });
      expect([free.status, free.body.model]).toEqual([202, 'ltx-video']);
      const standard = await kiln.call('POST', '/v1/videos/transitions', {
        body: { ...body, model: 'wan-2.2' },
        headers,
        key: await kiln.key('media-tiers'),
      });
      expect([standard.status, standard.body.error?.code]).toEqual([422, 'idempotency-key-reused']);
    }, 60_000);

    it('a seed the caller gives is bound too: the same key with another seed is refused', async () => {
      const headers = { 'idempotency-key': `media-${++key}` };
      const body = { prompt: 'a kiln', mode: 'async', size: '512x512' };
      const first = await kiln.call('POST', '/v1/images/generations', {
        body: { ...body, seed: 7 },
        headers,
      });
      expect([first.status, first.body.seed]).toEqual([202, 7]);
      const same = await kiln.call('POST', '/v1/images/generations', { body: { ...body, seed: 7 }, headers });
      expect([same.status, same.body.id]).toEqual([202, first.body.id]);
      for (const seed of [8, undefined]) {
        const other = await kiln.call('POST', '/v1/images/generations', { body: { ...body, seed }, headers });
        expect([other.status, other.body.error?.code], String(seed)).toEqual([422, 'idempotency-key-reused']);
      }
    }, 60_000);
  });
}
