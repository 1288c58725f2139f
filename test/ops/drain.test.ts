import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, simPool } from '../chat/fleet.js';
import {
  type KilnProcess,
  type ProcessWorld,
  processWorld,
  startServerProcess,
  waitUntil,
} from '../helpers/process.js';
import { storeCases } from '../helpers/stores.js';

const postgres = storeCases.find((c) => c.name === 'postgres');

type Gateway = KilnProcess & { url: string };

/** What happened to one request: answered in full, refused before it was accepted, or lost after. */
type Outcome = {
  kind: 'sync' | 'stream' | 'async';
  result: 'answered' | 'lost';
  detail?: string;
  job?: string;
};

/** A connection the gateway never took: the client may send the request elsewhere. */
const notAccepted = (error: unknown) => {
  const code = (error as { code?: string }).code ?? (error as { cause?: { code?: string } }).cause?.code;
  return code === 'ECONNREFUSED';
};

/**
 * A request that reached a gateway on a connection it opened just before its SIGTERM: refused with
 * 503 `shutting-down` before anything was accepted (docs/operations.md), so the client sends it elsewhere.
 */
const refusedWhileClosing = (status: number, text: string) =>
  status === 503 && text.includes('"code":"shutting-down"');

/**
 * A rolling restart under load on PostgreSQL: two gateways, each sent SIGTERM in turn while sync,
 * stream and async requests flow, and started again. Every request a gateway accepted is answered
 * in full, every async job completes, and each is billed once.
 */
describe.skipIf(!postgres || postgres.skip)('graceful drain: a rolling restart under load', () => {
  let world: ProcessWorld;
  let sims: LlmSim[] = [];
  let env: Record<string, string>;
  const live: Gateway[] = [];
  const outcomes: Outcome[] = [];
  let key: string;
  let stopLoad = false;

  /** A request to the next live gateway; another one if this one is no longer listening. */
  const send = async (route: string, body: unknown, headers: Record<string, string> = {}) => {
    for (let tries = 0; ; tries++) {
      const gateway = live[(outcomes.length + tries) % live.length] as Gateway;
      try {
        return await request(`${gateway.url}${route}`, {
          method: 'POST',
          // One connection per request: no keep-alive connection closing under a request in flight.
          reset: true,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
        });
      } catch (error) {
        if (!notAccepted(error) || tries > 20) throw error;
        await sleep(20);
      }
    }
  };

  const oneRequest = async (kind: Outcome['kind']): Promise<Outcome> => {
    try {
      if (kind === 'async') {
        const idempotency = randomUUID();
        const answer = await send(
          '/v1/test/sleep',
          { ms: 200 + Math.floor(Math.random() * 600) },
          {
            'idempotency-key': idempotency,
          },
        );
        const text = await answer.body.text();
        if (refusedWhileClosing(answer.statusCode, text)) return oneRequest(kind);
        const body = JSON.parse(text) as { id?: string };
        return answer.statusCode === 202 && body.id
          ? { kind, result: 'answered', job: body.id }
          : { kind, result: 'lost', detail: `${answer.statusCode} ${JSON.stringify(body)}` };
      }
      const stream = kind === 'stream';
      const answer = await send('/v1/chat/completions', {
        model: 'm',
        max_tokens: 30,
        stream,
        messages: [{ role: 'user', content: `drain ${randomUUID()}` }],
      });
      const text = await answer.body.text();
      if (refusedWhileClosing(answer.statusCode, text)) return oneRequest(kind);
      const complete = stream
        ? text.trimEnd().endsWith('data: [DONE]')
        : answer.statusCode === 200 && text.includes('"choices"');
      return complete
        ? { kind, result: 'answered' }
        : { kind, result: 'lost', detail: `${answer.statusCode} ${text.slice(-200)}` };
    } catch (error) {
      return { kind, result: 'lost', detail: String(error) };
    }
  };

  const startGateway = async () => {
    const gateway = await startServerProcess(env);
    live.push(gateway);
    return gateway;
  };
  /** SIGTERM: the gateway leaves the rotation, finishes what it accepted, and exits 0. */
  const restart = async (gateway: Gateway) => {
    live.splice(live.indexOf(gateway), 1);
    const started = Date.now();
    gateway.child.kill('SIGTERM');
    const exit = await gateway.exited;
    expect(exit, gateway.output()).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(15_000);
    return startGateway();
  };

  beforeAll(async () => {
    sims = await simPool(2, { decodeMsPerToken: 20 });
    world = processWorld(postgres as NonNullable<typeof postgres>, 'kiln-drain-');
    const configFile = path.join(world.dataDir, 'kiln.yaml');
    writeFileSync(
      configFile,
      JSON.stringify({
        engines: { pool: { serves: 'unique', replicas: sims.map((s) => s.url), models: { m: 'sim-model' } } },
      }),
    );
    env = world.env({ KILN_CONFIG: configFile, KILN_JOBS_WORKERS: '8', KILN_SHUTDOWN_GRACE: '10s' });
    await startGateway();
    key = world.adminKey();
    await startGateway();
  }, 60_000);
  afterAll(async () => {
    await world?.cleanup();
    await closeAll(sims);
  });

  it('answers every accepted request, completes every async job once and bills it once', async () => {
    const kinds: Outcome['kind'][] = ['sync', 'stream', 'async'];
    const lanes = Array.from({ length: 6 }, async (_, lane) => {
      for (let i = 0; !stopLoad; i++)
        outcomes.push(await oneRequest(kinds[(lane + i) % 3] as Outcome['kind']));
    });
    await sleep(1500);
    const [first, second] = [...live] as [Gateway, Gateway];
    await restart(first);
    await sleep(1500);
    await restart(second);
    await sleep(1500);
    stopLoad = true;
    await Promise.all(lanes);

    const lost = outcomes.filter((o) => o.result === 'lost');
    expect(lost).toEqual([]);
    for (const kind of kinds) expect(outcomes.filter((o) => o.kind === kind).length).toBeGreaterThan(10);

    const jobs = outcomes
      .filter((o) => o.kind === 'async')
      .map((o) => (o.job as string).replace(/^[a-z]+-/, ''));
    const store = world.store();
    await waitUntil(
      async () => {
        for (const id of jobs) if ((await store.jobs.byId(id))?.status !== 'completed') return false;
        return true;
      },
      { timeoutMs: 30_000, describe: () => 'every async job to complete' },
    );
    for (const id of jobs) {
      expect(await store.usage.countForJob(id), `ledger rows of ${id}`).toBe(1);
    }
  }, 120_000);
});
