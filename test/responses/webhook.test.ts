import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../src/client/webhooks.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { expectValidResponse } from '../helpers/openai-schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

interface Delivery {
  headers: IncomingHttpHeaders;
  body: string;
}

/** A webhook receiver on loopback that records what it is sent. */
async function receiver(): Promise<{ url: string; deliveries: Delivery[]; server: Server }> {
  const deliveries: Delivery[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return { url: `http://127.0.0.1:${address.port}/hooks/kiln`, deliveries, server };
}

/** A webhook on a background response is delivered, signed, like every other job's. */
describe.each(storeCases)('a background response with a webhook ($name)', (storeCase) => {
  let kiln: TestServer;
  let sims: LlmSim[];
  let client: OpenAI;
  let hooks: Awaited<ReturnType<typeof receiver>>;

  beforeAll(async () => {
    if (storeCase.skip) return;
    sims = await simPool(1);
    hooks = await receiver();
    kiln = await startTestServer(storeCase, {
      engines: { pool: engine('unique', sims) },
      personas: { brief: { model: 'm', defaults: { stop: ['.'] } } },
      'security.allow_hosts': ['127.0.0.1'],
    });
    client = new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: kiln.adminKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sims ?? []);
    await new Promise((resolve) => hooks?.server.close(resolve));
  });

  it.skipIf(storeCase.skip)(
    'is called once with the job, its result the completed response, signed with the secret',
    async () => {
      const secret = 'whsec_responses_test_secret';
      const created = await client.responses.create({
        model: 'brief',
        input: 'Tell me about kilns.',
        background: true,
        // Kiln's own field: the SDK passes unknown body fields through.
        ...({ webhook: { url: hooks.url, secret } } as object),
      });
      expect(created.status).toBe('queued');
      const deadline = Date.now() + 10_000;
      while (hooks.deliveries.length === 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 25));
      const [delivery] = hooks.deliveries;
      expect(delivery).toBeDefined();
      const { headers, body } = delivery as Delivery;
      expect(verifyWebhook(secret, headers as Record<string, string>, body)).toBe(true);
      const job = JSON.parse(body);
      expect(job).toMatchObject({ id: created.id, object: 'job', kind: 'response', status: 'completed' });
      expect(job.result).toMatchObject({ id: created.id, object: 'response', status: 'completed' });
      expect(job.result.output_text.length).toBeGreaterThan(0);
      expectValidResponse(job.result);
      // The same response, retrieved.
      expect(await client.responses.retrieve(created.id)).toEqual(job.result);
      await new Promise((r) => setTimeout(r, 200));
      expect(hooks.deliveries).toHaveLength(1);
    },
  );

  it.skipIf(storeCase.skip)(
    'is refused on a foreground stream, and its address is checked before any response exists',
    async () => {
      const before = (await kiln.call('GET', '/v1/jobs?kind=response&limit=100')).body.data.length;
      const streamed = await kiln.call('POST', '/v1/responses', {
        body: { model: 'brief', input: 'hi', stream: true, webhook: { url: hooks.url } },
      });
      expect(streamed.status).toBe(400);
      expect(streamed.body.error.param).toBe('webhook');
      const unsafe = await kiln.call('POST', '/v1/responses', {
        body: {
          model: 'brief',
          input: 'hi',
          background: true,
          webhook: { url: 'http://169.254.169.254/latest' },
        },
      });
      expect(unsafe.status).toBe(400);
      expect(unsafe.body.error.code).toBe('unsafe-url');
      expect((await kiln.call('GET', '/v1/jobs?kind=response&limit=100')).body.data.length).toBe(before);
    },
  );
});
