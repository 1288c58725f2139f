import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { type AddressInfo, createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDns, type TestDns } from '../helpers/dns.js';
import { callGateway } from '../helpers/http.js';
import { type KilnProcess, processWorld, startServerProcess } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * Images in chat messages and Responses input are outbound URLs too (DESIGN.md section 5): an
 * engine given a URL dials it from inside the GPU network. Kiln refuses unsafe ones before any job
 * exists, fetches safe `https://` ones itself when the job runs, and hands the engine `data:` URIs
 * only, so that the engine dials nothing.
 */

const PNG = `data:image/png;base64,${Buffer.from('89504e470d0a1a0a', 'hex').toString('base64')}`;
const COMPLETION = {
  id: 'up',
  object: 'chat.completion',
  created: 1,
  model: 'up-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'a picture' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
};

type Asked = { messages: Array<{ content: unknown }> };

/** The engine: records each chat request it is asked in `asked`, answers one completion. */
async function startEngine(asked: Asked[]): Promise<Server> {
  const engine = createServer((request, response) => {
    let text = '';
    request.setEncoding('utf8').on('data', (piece: string) => {
      text += piece;
    });
    request.on('end', () => {
      if (request.url === '/v1/chat/completions') asked.push(JSON.parse(text));
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(request.url === '/v1/chat/completions' ? COMPLETION : { data: [] }));
    });
  });
  await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
  return engine;
}

describe('images in chat and Responses requests', () => {
  let kiln: TestServer;
  let dns: TestDns;
  /** The engine: records what it is asked, answers one completion. */
  let engine: Server;
  const asked: Asked[] = [];
  /** Where `img.test` points: counts the connections Kiln makes to fetch an image. */
  let imageHost: TcpServer;
  let imageConnections = 0;
  let imagePort: number;

  beforeAll(async () => {
    engine = await startEngine(asked);
    // Not TLS: the fetch Kiln makes fails, which is all these tests need to see it was Kiln's.
    imageHost = createTcpServer((socket) => {
      imageConnections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => imageHost.listen(0, '127.0.0.1', resolve));
    imagePort = (imageHost.address() as AddressInfo).port;
    dns = await startTestDns({ 'img.test': ['127.0.0.1'], 'meta.test': ['169.254.169.254'] });
    const engineUrl = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    kiln = await startTestServer(storeCases[0] as (typeof storeCases)[0], {
      engines: { up: { serves: 'unique', replicas: [engineUrl], models: { m: 'up-model' } } },
      'security.allow_hosts': ['127.0.0.1'],
      'security.dns_servers': [dns.server],
    });
  });
  afterAll(async () => {
    await kiln?.close();
    await dns?.close();
    engine?.closeAllConnections();
    await new Promise((resolve) => engine?.close(resolve));
    await new Promise((resolve) => imageHost?.close(resolve));
  });

  const jobCount = async () =>
    Number((await kiln.server.store.driver.get<{ n: number | string }>('SELECT COUNT(*) AS n FROM jobs'))?.n);
  const chat = (imageUrl: unknown) =>
    kiln.call('POST', '/v1/chat/completions', {
      body: {
        model: 'm',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'what is this?' },
              { type: 'image_url', image_url: imageUrl },
            ],
          },
        ],
      },
    });

  it.each([
    ['a metadata address over http', { url: 'http://169.254.169.254/latest/meta-data/' }],
    ['a metadata address over https', { url: 'https://169.254.169.254/latest/meta-data/' }],
    ['a metadata name', { url: 'https://metadata.google.internal/computeMetadata/v1/' }],
    ['a name resolving to a metadata address', { url: 'https://meta.test/x.png' }],
    ['plain http', { url: `http://img.test:${1}/x.png` }],
    ['a file', { url: 'file:///etc/passwd' }],
    ['the string form', 'http://169.254.169.254/'],
    ['no url at all', {}],
  ])(
    'chat: %s is refused with a 400 naming the part, before any job, and no engine sees it',
    async (_, imageUrl) => {
      const [jobs, engineCalls] = [await jobCount(), asked.length];
      const answer = await chat(imageUrl);
      expect(answer.status, JSON.stringify(answer.body)).toBe(400);
      expect(answer.body.error.details?.[0]?.field ?? answer.body.error.param).toBe(
        'messages[0].content[1].image_url',
      );
      expect(await jobCount()).toBe(jobs);
      expect(asked.length).toBe(engineCalls);
    },
  );

  const media = (part: Record<string, unknown>) =>
    kiln.call('POST', '/v1/chat/completions', {
      body: { model: 'm', mode: 'async', messages: [{ role: 'user', content: [part] }] },
    });

  it.each([
    [
      'a video_url',
      { type: 'video_url', video_url: { url: 'http://169.254.169.254/latest/' } },
      'video_url.url',
    ],
    ['an audio_url', { type: 'audio_url', audio_url: { url: 'https://img.test/a.wav' } }, 'audio_url.url'],
    ['a file by url', { type: 'file', file: { file_url: 'http://127.0.0.1:1/x' } }, 'file.file_url'],
    ['a local path', { type: 'video_url', video_url: { url: 'file:/etc/passwd' } }, 'video_url.url'],
    [
      'a part of no known type',
      { type: 'x_media', sources: [{ href: 'ftp://10.0.0.5/x' }] },
      'sources[0].href',
    ],
  ])(
    'chat: %s, which an engine would fetch itself, is refused with a 400 naming it, before any job',
    async (_, part, at) => {
      const [jobs, engineCalls] = [await jobCount(), asked.length];
      const answer = await media(part);
      expect(answer.status, JSON.stringify(answer.body)).toBe(400);
      expect(answer.body.error.details[0]).toMatchObject({
        field: `messages[0].content[0].${at}`,
        rule: 'outbound',
      });
      expect(await jobCount()).toBe(jobs);
      expect(asked.length).toBe(engineCalls);
    },
  );

  it('chat: media given inline, and text that mentions a URL, go to the engine as sent', async () => {
    const inline = [
      { type: 'text', text: 'http://169.254.169.254/ is only words here' },
      { type: 'video_url', video_url: { url: 'data:video/mp4;base64,AAAA' } },
      { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERg==', filename: 'a.pdf' } },
    ];
    const answer = await kiln.call('POST', '/v1/chat/completions', {
      body: { model: 'm', messages: [{ role: 'user', content: inline }] },
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(asked.at(-1)?.messages.at(-1)?.content).toEqual(inline);
  });

  it('Responses: an input_image at a metadata address is refused the same way, naming its input item', async () => {
    const jobs = await jobCount();
    const answer = await kiln.call('POST', '/v1/responses', {
      body: {
        model: 'm',
        input: [
          { type: 'function_call', call_id: 'c1', name: 'look', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'a cat' },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'what is this?' },
              { type: 'input_image', image_url: 'http://metadata.google.internal/computeMetadata/v1/' },
            ],
          },
        ],
      },
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error.param).toBe('input[2].content[1].image_url');
    expect(await jobCount()).toBe(jobs);
  });

  it('a data: image reaches the engine as it was sent', async () => {
    const answer = await chat({ url: PNG, detail: 'low' });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(asked.at(-1)?.messages.at(-1)?.content).toEqual([
      { type: 'text', text: 'what is this?' },
      { type: 'image_url', image_url: { url: PNG, detail: 'low' } },
    ]);
  });

  it('a data: image of a few megabytes is taken, as files.max_input_bytes allows, not refused as too large a body', async () => {
    const bytes = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(3_000_000, 7)]);
    const big = `data:image/png;base64,${bytes.toString('base64')}`;
    const answer = await chat({ url: big });
    expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(200);
    const sent = asked.at(-1)?.messages.at(-1)?.content as Array<{ image_url?: { url: string } }>;
    expect(sent[1]?.image_url?.url).toBe(big);
  });

  it('a safe https image is fetched by Kiln when the job runs, never handed to the engine', async () => {
    const [connections, engineCalls] = [imageConnections, asked.length];
    const answer = await chat({ url: `https://img.test:${imagePort}/cat.png` });
    // The image host is no TLS server, so Kiln's own fetch fails, and the job with it: the
    // caller's URL gave no image, a 400 naming the part, not a gateway error.
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid-image-url',
      param: 'messages[0].content[1].image_url',
    });
    expect(answer.body.error.message).toMatch(
      /^messages\[0\]\.content\[1\]\.image_url could not be fetched: /,
    );
    expect(answer.body.job).toMatchObject({ status: 'failed', code: 'invalid-image-url' });
    expect(imageConnections).toBeGreaterThan(connections);
    expect(asked.length).toBe(engineCalls);
  });

  it('Responses: an https image that gives no image fails the response with a 400 naming its input item', async () => {
    const engineCalls = asked.length;
    const image = { type: 'input_image', image_url: `https://img.test:${imagePort}/cat.png` };
    const input = [
      { role: 'user', content: 'first, some text' },
      { role: 'user', content: [{ type: 'input_text', text: 'what is this?' }, image] },
    ];
    const answer = await kiln.call('POST', '/v1/responses', { body: { model: 'm', input } });
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error).toMatchObject({
      code: 'invalid-image-url',
      param: 'input[1].content[1].image_url',
    });
    expect(answer.body.error.message).toMatch(/^input\[1\]\.content\[1\]\.image_url could not be fetched/);
    // Streamed, it fails before any event: an HTTP 400 too. In the background, the stored
    // response fails with OpenAI's code for it.
    const streamed = await kiln.call('POST', '/v1/responses', { body: { model: 'm', input, stream: true } });
    expect(streamed.status, JSON.stringify(streamed.body)).toBe(400);
    expect(streamed.body.error).toMatchObject({
      code: 'invalid-image-url',
      param: 'input[1].content[1].image_url',
    });
    const background = await kiln.call('POST', '/v1/responses', {
      body: { model: 'm', input, background: true },
    });
    expect(background.status).toBe(200);
    let polled = background.body;
    for (let i = 0; i < 100 && (polled.status === 'queued' || polled.status === 'in_progress'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      polled = (await kiln.call('GET', `/v1/responses/${background.body.id}`)).body;
    }
    expect(polled.status).toBe('failed');
    expect(polled.error.code).toBe('invalid_image_url');
    expect(polled.error.message).toMatch(/^invalid-image-url: input\[1\]\.content\[1\]\.image_url could not/);
    expect(asked.length).toBe(engineCalls);
  });
});

/**
 * The whole way, with a real TLS image server: the gateway (a child process trusting the test's
 * certificate authority through NODE_EXTRA_CA_CERTS) fetches the image and the engine gets it as a
 * `data:` URI, GIF included, as OpenAI's chat models take it.
 */
describe('images in chat requests, fetched over https', () => {
  const world = processWorld(storeCases[0] as (typeof storeCases)[0], 'kiln-chat-images-');
  const dir = mkdtempSync(path.join(tmpdir(), 'kiln-chat-images-tls-'));
  let dns: TestDns;
  let engine: Server;
  let images: HttpsServer;
  let gateway: KilnProcess & { url: string };
  const asked: Asked[] = [];
  const served = new Map<string, Buffer>();

  beforeAll(async () => {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=img.test',
        '-addext',
        'subjectAltName=DNS:img.test',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    served.set(
      '/cat.png',
      await sharp({ create: { width: 8, height: 8, channels: 3, background: '#c60' } })
        .png()
        .toBuffer(),
    );
    served.set(
      '/cat.gif',
      await sharp({ create: { width: 8, height: 8, channels: 3, background: '#06c' } })
        .gif()
        .toBuffer(),
    );
    images = createHttpsServer(
      { key: readFileSync(path.join(dir, 'key.pem')), cert: readFileSync(path.join(dir, 'cert.pem')) },
      (request, response) => {
        const body = served.get(request.url ?? '');
        response.writeHead(body ? 200 : 404, { 'content-type': 'application/octet-stream' });
        response.end(body);
      },
    );
    await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve));
    engine = await startEngine(asked);
    dns = await startTestDns({ 'img.test': ['127.0.0.1'] });
    const configFile = path.join(dir, 'kiln.yaml');
    const engineUrl = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    writeFileSync(
      configFile,
      JSON.stringify({
        engines: { up: { serves: 'unique', replicas: [engineUrl], models: { m: 'up-model' } } },
      }),
    );
    gateway = await startServerProcess(
      world.env({
        KILN_CONFIG: configFile,
        KILN_SECURITY_ALLOW_HOSTS: '127.0.0.1',
        KILN_SECURITY_DNS_SERVERS: dns.server,
        NODE_EXTRA_CA_CERTS: path.join(dir, 'cert.pem'),
      }),
    );
  }, 30_000);
  afterAll(async () => {
    await world.cleanup();
    await dns?.close();
    engine?.closeAllConnections();
    await new Promise((resolve) => engine?.close(resolve));
    await new Promise((resolve) => images?.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['a PNG, object form', '/cat.png', (url: string) => ({ url, detail: 'high' }), 'image/png'],
    ['a GIF, string form', '/cat.gif', (url: string) => url, 'image/gif'],
  ])('%s: the engine gets the bytes as a data: URI, never the URL', async (_, file, form, type) => {
    const url = `https://img.test:${(images.address() as AddressInfo).port}${file}`;
    const answer = await callGateway(gateway.url, world.adminKey(), 'POST', '/v1/chat/completions', {
      model: 'm',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'what is this?' },
            { type: 'image_url', image_url: form(url) },
          ],
        },
      ],
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    const content = (asked.at(-1)?.messages.at(-1)?.content ?? []) as Array<{
      image_url: { url: string; detail?: string };
    }>;
    const part = content[1];
    expect(part?.image_url.url).toBe(
      `data:${type};base64,${(served.get(file) as Buffer).toString('base64')}`,
    );
    expect(JSON.stringify(asked.at(-1))).not.toContain('img.test');
  });
});
