import { crc32, deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDns } from '../helpers/dns.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/** Spec section 4.4, rule by rule: every bad transition request is a 400 naming its field, and no job. */
describe('POST /v1/videos/transitions validation', () => {
  let kiln: TestServer;
  let png: string;
  let dns: Awaited<ReturnType<typeof startTestDns>>;
  const jobCount = async () =>
    Number((await kiln.server.store.driver.get<{ n: number | string }>('SELECT COUNT(*) AS n FROM jobs'))?.n);

  beforeAll(async () => {
    dns = await startTestDns({ 'metadata.rebind.test': ['169.254.169.254'] });
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      'jobs.workers': 0,
      'security.dns_servers': [dns.server],
    });
    const bytes = await sharp({ create: { width: 64, height: 36, channels: 3, background: '#336699' } })
      .png()
      .toBuffer();
    png = `data:image/png;base64,${bytes.toString('base64')}`;
  });
  afterAll(async () => {
    await kiln?.close();
    await dns?.close();
  });

  const post = (body: Record<string, unknown>, key?: string) =>
    kiln.call('POST', '/v1/videos/transitions', { body, ...(key ? { key } : {}) });

  const cases: Array<[string, Record<string, unknown>, string, string?]> = [
    ['missing start_image', {}, 'start_image', 'required'],
    ['start_image not a string', { start_image: 42 }, 'start_image', 'type'],
    ['http:// start image', { start_image: 'http://example.com/a.png' }, 'start_image', 'pattern'],
    ['ftp:// end image', { end_image: 'ftp://example.com/b.png' }, 'end_image', 'pattern'],
    [
      'data: of a non-image type',
      { start_image: 'data:text/plain;base64,aGVsbG8=' },
      'start_image',
      'pattern',
    ],
    [
      'data: image that is not an image',
      { start_image: 'data:image/png;base64,aGVsbG8gd29ybGQ=' },
      'start_image',
      'image',
    ],
    ['unknown model', { model: 'sora' }, 'model', 'enum'],
    ['prompt of 2001 characters', { prompt: 'p'.repeat(2001) }, 'prompt', 'max_length'],
    [
      'negative_prompt of 2001 characters',
      { negative_prompt: 'n'.repeat(2001) },
      'negative_prompt',
      'max_length',
    ],
    ['duration 0', { duration_seconds: 0 }, 'duration_seconds', 'minimum'],
    ['duration 16', { duration_seconds: 16 }, 'duration_seconds', 'maximum'],
    ['duration 2.5', { duration_seconds: 2.5 }, 'duration_seconds', 'type'],
    ['duration as a string', { duration_seconds: '4' }, 'duration_seconds', 'type'],
    ['size not in the table', { size: '1000x1000' }, 'size', 'enum'],
    ['seed below 0', { seed: -1 }, 'seed', 'minimum'],
    ['seed above 2^32-1', { seed: 4294967296 }, 'seed', 'maximum'],
    ['camelCase startImage', { startImage: 'x' }, 'startImage', 'unknown-field'],
    ['camelCase durationSeconds', { durationSeconds: 4 }, 'durationSeconds', 'unknown-field'],
    ['unknown field', { fps: 30 }, 'fps', 'unknown-field'],
    ['webhook without url', { webhook: {} }, 'webhook.url', 'required'],
  ];

  it.each(cases)('%s → 400 naming %s', async (_name, fields, field, rule) => {
    const before = await jobCount();
    const body =
      'start_image' in fields || field === 'start_image' ? { ...fields } : { start_image: png, ...fields };
    const answer = await post(body);
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error.code).toBe('validation-failed');
    expect(answer.body.error.details.length).toBeGreaterThan(0);
    expect(answer.body.error.details).toEqual(
      expect.arrayContaining([expect.objectContaining({ field, ...(rule ? { rule } : {}) })]),
    );
    expect(await jobCount()).toBe(before);
  });

  it('accepts inline images of several megabytes (the body limit follows files.max_input_bytes)', async () => {
    const noise = await sharp({
      create: {
        width: 1024,
        height: 1024,
        channels: 3,
        background: '#808080',
        noise: { type: 'gaussian', mean: 128, sigma: 40 },
      },
    })
      .png()
      .toBuffer();
    expect(noise.length).toBeGreaterThan(2_000_000);
    const big = `data:image/png;base64,${noise.toString('base64')}`;
    const answer = await post({ start_image: big, end_image: big });
    expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(202);
  });

  it('refuses a data: image cut short, whose header alone still reads as a PNG', async () => {
    const whole = Buffer.from(png.slice(png.indexOf(',') + 1), 'base64');
    const cut = `data:image/png;base64,${whole.subarray(0, Math.floor(whole.length / 2)).toString('base64')}`;
    const answer = await post({ start_image: cut });
    expect(answer.status).toBe(400);
    expect(answer.body.error.details).toEqual([
      expect.objectContaining({ field: 'start_image', rule: 'image' }),
    ]);
  });

  it('lists every bad image and an unsafe webhook in one 400, and makes no job', async () => {
    const before = await jobCount();
    const notAnImage = 'data:image/png;base64,aGVsbG8=';
    const answer = await post({
      start_image: notAnImage,
      end_image: notAnImage,
      webhook: { url: 'http://169.254.169.254/hook' },
    });
    expect(answer.status).toBe(400);
    expect(answer.body.error.details).toEqual([
      expect.objectContaining({ field: 'start_image', rule: 'image' }),
      expect.objectContaining({ field: 'end_image', rule: 'image' }),
      expect.objectContaining({ field: 'webhook.url', rule: 'unsafe-url' }),
    ]);
    expect(answer.body.error).toMatchObject({ code: 'validation-failed', param: 'start_image' });
    expect(await jobCount()).toBe(before);
  });

  it('refuses a PNG whose header claims 20000×20000 pixels by its size, before decoding it', async () => {
    const chunk = (type: string, data: Buffer) => {
      const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
      const framed = Buffer.alloc(body.length + 8);
      framed.writeUInt32BE(data.length, 0);
      body.copy(framed, 4);
      framed.writeUInt32BE(crc32(body), body.length + 4);
      return framed;
    };
    const header = Buffer.alloc(13);
    header.writeUInt32BE(20_000, 0);
    header.writeUInt32BE(20_000, 4);
    header.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
    const bomb = Buffer.concat([
      Buffer.from('89504e470d0a1a0a', 'hex'),
      chunk('IHDR', header),
      chunk('IDAT', deflateSync(Buffer.alloc(1024))),
      chunk('IEND', Buffer.alloc(0)),
    ]);
    const before = await jobCount();
    const answer = await post({ start_image: `data:image/png;base64,${bomb.toString('base64')}` });
    expect(answer.status).toBe(400);
    expect(answer.body.error.details).toEqual([
      expect.objectContaining({
        field: 'start_image',
        rule: 'max_pixels',
        limit: 50_000_000,
        received: 400_000_000,
      }),
    ]);
    expect(await jobCount()).toBe(before);
  });

  it('refuses a data: URI over 28,000,000 characters as too long, whatever the byte cap', async () => {
    const long = `data:image/png;base64,${'A'.repeat(28_000_000 - 21)}`;
    const answer = await post({ start_image: long });
    expect(answer.status).toBe(400);
    expect(answer.body.error.details).toEqual([
      expect.objectContaining({
        field: 'start_image',
        rule: 'max_length',
        limit: 28_000_000,
        received: 28_000_001,
      }),
    ]);
  });

  it('hints at the snake_case name of a camelCase look-alike', async () => {
    const answer = await post({ start_image: png, endImage: png, negativePrompt: 'x' });
    const messages = answer.body.error.details.map((d: { message: string }) => d.message);
    expect(messages).toEqual(
      expect.arrayContaining([
        "unknown field 'endImage' (did you mean end_image?)",
        "unknown field 'negativePrompt' (did you mean negative_prompt?)",
      ]),
    );
  });

  it('refuses an https:// image whose host resolves to a metadata address, before any job exists', async () => {
    const before = await jobCount();
    for (const url of [
      'https://metadata.rebind.test/frame.png',
      'https://169.254.169.254/latest/meta-data',
      'https://[::ffff:169.254.169.254]/x.png',
    ]) {
      const answer = await post({ start_image: url });
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ code: 'unsafe-url', param: 'start_image' });
    }
    expect(
      (await post({ start_image: png, end_image: 'https://metadata.google.internal/x.png' })).body.error
        .param,
    ).toBe('end_image');
    expect(await jobCount()).toBe(before);
  });

  const sizes: Array<[string, string, boolean]> = [
    ['512x512', '512x512', false],
    ['720x720', '704x704', true],
    ['1024x1024', '1024x1024', false],
    ['832x480', '832x480', false],
    ['1280x720', '1280x704', true],
    ['1920x1080', '1920x1056', true],
    ['480x832', '480x832', false],
    ['720x1280', '704x1280', true],
    ['1080x1920', '1056x1920', true],
    ['1024x1280', '1024x1280', false],
    ['1280x1024', '1280x1024', false],
  ];

  it.each(sizes)('size %s is accepted as %s (adjusted: %s)', async (size, effective, adjusted) => {
    const answer = await post({ start_image: png, size });
    expect(answer.status).toBe(202);
    expect(answer.body).toMatchObject({
      object: 'video.transition',
      status: 'queued',
      size: effective,
      size_adjusted: adjusted,
    });
    expect(answer.body.id).toMatch(/^vidgen-[0-9a-f-]{36}$/);
    expect(answer.body.polling_url).toBe(`/v1/jobs/${answer.body.id.slice('vidgen-'.length)}`);
  });

  it('defaults: ltx-video, 4 s, and a free-tier key gets ltx-video whatever it asks', async () => {
    const plain = await post({ start_image: png });
    expect(plain.body.model).toBe('ltx-video');
    const asked = await post({ start_image: png, model: 'ltx-2.3' });
    expect(asked.body.model).toBe('ltx-2.3');
    const free = await kiln.key('default', { tier: 'free' });
    const forced = await post({ start_image: png, model: 'ltx-2.3' }, free);
    expect(forced.status).toBe(202);
    expect(forced.body.model).toBe('ltx-video');
    const job = await kiln.server.store.jobs.byId(forced.body.id.slice('vidgen-'.length));
    expect(JSON.parse(job?.request ?? '{}')).toMatchObject({ model: 'ltx-video', duration_seconds: 4 });
  });
});
