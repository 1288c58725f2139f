import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { POSTGRES_URL } from '../helpers/postgres.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, type StoreCase, storeCases } from '../helpers/stores.js';
import { closeAll, engine, expectEngineStopped, settledJob, simPool, until } from './fleet.js';

/**
 * A caller that leaves while its job is still being recorded cancels it too, and the engine
 * generates nothing for it. The insert is held up by a lock on the jobs table, which only PostgreSQL
 * lets a test take without stopping the gateway (SQLite's writes block the whole process, so no close
 * can arrive in between there).
 */
const postgres = storeCases.find((c) => c.name === 'postgres') as StoreCase;

describe.skipIf(postgres.skip)(`a caller gone before its job is recorded: ${caseTitle(postgres)}`, () => {
  let kiln: TestServer;
  let sim: LlmSim;
  let schema = '';
  // A long prompt prefills slowly (about 2 s), so a job that runs at all is seen generating.
  const longPrompt = 'clay '.repeat(2000);

  beforeAll(async () => {
    [sim] = (await simPool(1, { flavor: 'vllm', prefillMsPerToken: 1, decodeMsPerToken: 10 })) as [LlmSim];
    const named: StoreCase = {
      ...postgres,
      skip: undefined,
      fresh() {
        const fresh = postgres.fresh();
        schema = fresh.store.schema;
        return fresh;
      },
    };
    kiln = await startTestServer(named, { engines: { pool: engine('unique', [sim]) } });
  });
  afterAll(async () => {
    await kiln?.close();
    await closeAll(sim ? [sim] : []);
  });

  const settled = (key: string) => settledJob(kiln, key, 10_000);

  /**
   * Sends a chat request while the jobs table is locked, leaves once its job's insert is seen waiting
   * (not the workers' claims, which wait too), then lets it through; answers the organisation's key.
   */
  async function leaveWhileRecording(body: Record<string, unknown>): Promise<string> {
    const key = await kiln.key(`leaving-${Math.random()}`);
    const locker = new pg.Client({ connectionString: POSTGRES_URL });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${schema}".jobs IN EXCLUSIVE MODE`);
      const leaving = new AbortController();
      const answer = fetch(`${kiln.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', max_tokens: 50, ...body }),
        signal: leaving.signal,
      });
      answer.catch(() => undefined);
      await until(
        async () => {
          // pg_stat_activity is read once per transaction unless its snapshot is cleared.
          await locker.query('SELECT pg_stat_clear_snapshot()');
          const waiting = await locker.query(
            `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE NOT l.granted AND l.relation = $1::regclass AND a.query LIKE 'INSERT INTO jobs %'`,
            [`"${schema}".jobs`],
          );
          return waiting.rows[0].n > 0;
        },
        10_000,
        'the insert waiting on the lock',
      );
      leaving.abort();
      await expect(answer).rejects.toMatchObject({ name: 'AbortError' });
      // The gateway sees the connection close while the insert still waits.
      await sleep(200);
      await locker.query('COMMIT');
    } finally {
      await locker.end();
    }
    return key;
  }

  it('a stream: its job ends cancelled and the replica generates nothing', async () => {
    const before = sim.stats().generationTokens;
    const key = await leaveWhileRecording({
      stream: true,
      messages: [{ role: 'user', content: longPrompt }],
    });
    expect((await settled(key)).status).toBe('cancelled');
    expect((await expectEngineStopped(sim)) - before).toBe(0);
  });

  it('a sync request: its job ends cancelled and the replica generates nothing', async () => {
    const before = sim.stats().generationTokens;
    const key = await leaveWhileRecording({ messages: [{ role: 'user', content: longPrompt }] });
    expect((await settled(key)).status).toBe('cancelled');
    expect((await expectEngineStopped(sim)) - before).toBe(0);
  });
});
