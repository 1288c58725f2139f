import OpenAI from 'openai';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { expectValidResponse, expectValidStreamEvent } from '../helpers/openai-schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import type { StoreCase } from '../helpers/stores.js';

/**
 * The Responses tests' Kiln: model `m` on a quick simulated replica (1 ms a token), model `slow`
 * on one that decodes 50 ms a token, so a response can be caught while it runs; persona `brief`
 * stops at the end of its first sentence, as a model that ends its answer.
 */
export interface ResponsesFleet {
  kiln: TestServer;
  quick: LlmSim;
  slow: LlmSim;
  /** The openai client of a new organisation, so that its jobs and usage are the test's alone. */
  client(org?: string): Promise<{ client: OpenAI; key: string }>;
  close(): Promise<void>;
}

export async function startResponsesFleet(storeCase: StoreCase): Promise<ResponsesFleet> {
  const [quick] = (await simPool(1)) as [LlmSim];
  const [slow] = (await simPool(1, { decodeMsPerToken: 50 })) as [LlmSim];
  const kiln = await startTestServer(storeCase, {
    engines: {
      quick: engine('unique', [quick]),
      slow: engine('unique', [slow], { models: { slow: 'sim-model' } }),
    },
    personas: { brief: { model: 'm', defaults: { stop: ['.'] } } },
    'jobs.poll_interval_ms': 100,
  });
  return {
    kiln,
    quick,
    slow,
    async client(org = `org-${Math.random().toString(36).slice(2)}`) {
      const key = await kiln.key(org);
      return { client: new OpenAI({ baseURL: `${kiln.url}/v1`, apiKey: key, maxRetries: 0 }), key };
    },
    async close() {
      await kiln.close();
      await closeAll([quick, slow]);
    },
  };
}

/** The response, once it has been checked against OpenAI's Response schema. */
export async function valid(answer: Promise<OpenAI.Responses.Response>): Promise<OpenAI.Responses.Response> {
  const response = await answer;
  expectValidResponse(response);
  return response;
}

/** Every event of a stream, in order. */
export async function eventsOf(stream: AsyncIterable<OpenAI.Responses.ResponseStreamEvent>) {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const event of stream) {
    expectValidStreamEvent(event);
    events.push(event);
  }
  return events;
}
