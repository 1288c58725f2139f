import { createOpenAI } from '@ai-sdk/openai';
import { AIMessage, type AIMessageChunk, HumanMessage } from '@langchain/core/messages';
import { tool as langchainTool } from '@langchain/core/tools';
import { concat } from '@langchain/core/utils/stream';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { countTokens, renderChatPrompt } from '../../src/sim/llm/text.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { expectValidResponse } from '../helpers/openai-schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { storeCases } from '../helpers/stores.js';

/**
 * Today's agent frameworks against Kiln, unchanged, as real peers over HTTP: the Vercel AI SDK's
 * default OpenAI provider and LangChain's ChatOpenAI, both speaking the Responses API to the
 * `kiln dev` fleet's persona `assistant`. Each test has an organisation of its own, so the
 * response jobs Kiln lists are exactly the requests the framework made; each is fetched back,
 * held to OpenAI's Response schema, and compared with what the framework reported.
 *
 * Every store runs the whole suite: a framework's requests are a few short simulated
 * generations, so both stores together take a few seconds.
 */

/** `kiln dev`'s persona, on the simulated model; `stop: ['.']` so that it ends its answer itself. */
const ASSISTANT = { model: 'm', system: 'You are a helpful assistant.', defaults: { stop: ['.'] } };

/** The simulated model calls a tool the user's last message names, with the message's proper noun. */
const WEATHER_QUESTION = 'What is the weather in Lyon? Ask get_weather.';

/** Prompt tokens the simulated engine counts for the persona's preamble and then `question`. */
const assistantPromptTokens = (question: string) =>
  countTokens(
    renderChatPrompt([
      { role: 'system', content: ASSISTANT.system },
      { role: 'user', content: question },
    ]),
  );

describe.each(storeCases)('agent frameworks against Kiln ($name)', (storeCase) => {
  let sim: LlmSim;
  let kiln: TestServer;

  beforeAll(async () => {
    if (storeCase.skip) return;
    [sim] = (await simPool(1)) as [LlmSim];
    kiln = await startTestServer(storeCase, {
      engines: { quick: engine('unique', [sim]) },
      personas: { assistant: ASSISTANT },
      'jobs.poll_interval_ms': 100,
    });
  });
  afterAll(async () => {
    await kiln?.close();
    if (sim) await closeAll([sim]);
  });

  /** A key of a new organisation: its jobs are the test's alone. */
  const freshKey = () => kiln.key(`org-${Math.random().toString(36).slice(2)}`);

  type ResponseObject = OpenAI.Responses.Response;

  /**
   * The organisation's responses, oldest first, which must be `count` (as many as the framework's
   * requests): the response jobs of `GET /v1/jobs`, each fetched with `GET /v1/responses/{id}` and
   * checked against OpenAI's Response schema.
   */
  async function storedResponses<N extends 1 | 2>(
    key: string,
    count: N,
  ): Promise<N extends 1 ? [ResponseObject] : [ResponseObject, ResponseObject]> {
    const list = await kiln.call('GET', '/v1/jobs?kind=response&limit=100', { key });
    expect(list.status).toBe(200);
    const ids = (list.body.data as Array<{ id: string }>).map((job) => job.id).reverse();
    expect(ids).toHaveLength(count);
    const responses: ResponseObject[] = [];
    for (const id of ids) {
      const got = await kiln.call('GET', `/v1/responses/${id}`, { key });
      expect(got.status).toBe(200);
      expectValidResponse(got.body);
      responses.push(got.body);
    }
    return responses as N extends 1 ? [ResponseObject] : [ResponseObject, ResponseObject];
  }

  /** The response's input items, in the order they were given. */
  async function inputItemsOf(key: string, id: string): Promise<Array<Record<string, unknown>>> {
    const got = await kiln.call('GET', `/v1/responses/${id}/input_items?order=asc`, { key });
    expect(got.status).toBe(200);
    return got.body.data;
  }

  /** The completed response's usage, which it always has. */
  function usageOf(response: ResponseObject): OpenAI.Responses.ResponseUsage {
    expect(response).toMatchObject({ status: 'completed', usage: { input_tokens: expect.any(Number) } });
    return response.usage as OpenAI.Responses.ResponseUsage;
  }

  describe.skipIf(storeCase.skip)("the Vercel AI SDK's default OpenAI provider", () => {
    const assistant = (key: string) => createOpenAI({ baseURL: `${kiln.url}/v1`, apiKey: key })('assistant');
    const getWeather = (cities: string[]) => ({
      get_weather: tool({
        description: 'The weather in a city',
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => {
          cities.push(city);
          return { city, temperature: 21 };
        },
      }),
    });

    it('generateText is one POST /v1/responses to the persona; its text, usage and finish reason are those Kiln stored', async () => {
      const key = await freshKey();
      const result = await generateText({ model: assistant(key), prompt: 'Describe a kiln.', maxRetries: 0 });

      const [stored] = await storedResponses(key, 1);
      expect(stored).toMatchObject({ id: result.response.id, model: 'assistant', status: 'completed' });
      expect(result.text.length).toBeGreaterThan(0);
      expect(result.text).toBe(stored.output_text);
      expect(result.finishReason).toBe('stop');
      expect(result.warnings).toEqual([]);
      const usage = usageOf(stored);
      expect(result.usage).toMatchObject({
        inputTokens: usage.input_tokens,
        outputTokens: usage.output_tokens,
        totalTokens: usage.total_tokens,
        cachedInputTokens: usage.input_tokens_details.cached_tokens,
      });
      // The persona's system preamble, then the prompt: `assistant` is the persona, not a bare model.
      expect(usage.input_tokens).toBe(assistantPromptTokens('Describe a kiln.'));
    });

    it('streamText: the text stream comes in pieces that join into the final text, which is what Kiln stored', async () => {
      const key = await freshKey();
      const errors: unknown[] = [];
      const result = streamText({
        model: assistant(key),
        prompt: 'Say something.',
        maxRetries: 0,
        onError: ({ error }) => void errors.push(error),
      });
      const pieces: string[] = [];
      for await (const piece of result.textStream) pieces.push(piece);
      expect(errors).toEqual([]);

      const text = await result.text;
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.join('')).toBe(text);
      expect(await result.finishReason).toBe('stop');
      const [stored] = await storedResponses(key, 1);
      expect(stored.id).toBe((await result.response).id);
      expect(stored.output_text).toBe(text);
      const usage = usageOf(stored);
      expect(await result.usage).toMatchObject({
        inputTokens: usage.input_tokens,
        outputTokens: usage.output_tokens,
        totalTokens: usage.total_tokens,
      });
    });

    it('a second turn with the history: the SDK names the stored answer by item_reference, which Kiln resolves', async () => {
      const key = await freshKey();
      const first = await generateText({ model: assistant(key), prompt: 'Say something.', maxRetries: 0 });
      const question = { role: 'user' as const, content: 'Say more about it.' };
      const second = await generateText({
        model: assistant(key),
        messages: [{ role: 'user', content: 'Say something.' }, ...first.response.messages, question],
        maxRetries: 0,
      });

      expect(second.text.length).toBeGreaterThan(0);
      const [asked, answered] = await storedResponses(key, 2);
      const [answer] = asked.output;
      // The earlier answer comes back as the stored item itself, under its own id.
      expect(await inputItemsOf(key, answered.id)).toMatchObject([
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say something.' }] },
        { type: 'message', role: 'assistant', id: answer?.id, content: [{ text: first.text }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: question.content }] },
      ]);
      // And the engine was sent it: the preamble, the first question, the answer, the second question.
      expect(usageOf(answered).input_tokens).toBe(
        countTokens(
          renderChatPrompt([
            { role: 'system', content: ASSISTANT.system },
            { role: 'user', content: 'Say something.' },
            { role: 'assistant', content: first.text },
            { role: 'user', content: question.content },
          ]),
        ),
      );
    });

    it('a tool: the model calls get_weather, the SDK runs it and sends its output back, and the model answers', async () => {
      const key = await freshKey();
      const cities: string[] = [];
      const result = await generateText({
        model: assistant(key),
        prompt: WEATHER_QUESTION,
        tools: getWeather(cities),
        stopWhen: stepCountIs(2),
        maxRetries: 0,
      });

      expect(cities).toEqual(['Lyon']);
      expect(result.steps.map((step) => step.finishReason)).toEqual(['tool-calls', 'stop']);
      const [call] = result.steps[0]?.toolCalls ?? [];
      expect(call).toMatchObject({ toolName: 'get_weather', input: { city: 'Lyon' } });
      expect(result.text.length).toBeGreaterThan(0);

      // Two requests: the question, then the whole conversation with the tool's output.
      const [asked, answered] = await storedResponses(key, 2);
      expect(asked.output).toEqual([
        expect.objectContaining({ type: 'function_call', name: 'get_weather', call_id: call?.toolCallId }),
      ]);
      expect(asked.tools).toEqual([expect.objectContaining({ type: 'function', name: 'get_weather' })]);
      expect(await inputItemsOf(key, answered.id)).toMatchObject([
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: WEATHER_QUESTION }] },
        { type: 'function_call', call_id: call?.toolCallId, name: 'get_weather' },
        {
          type: 'function_call_output',
          call_id: call?.toolCallId,
          output: JSON.stringify({ city: 'Lyon', temperature: 21 }),
        },
      ]);
      expect(answered.output.map((item) => item.type)).toEqual(['message']);
      expect(answered.output_text).toBe(result.text);
      const [first, second] = [usageOf(asked), usageOf(answered)];
      expect(result.totalUsage).toMatchObject({
        inputTokens: first.input_tokens + second.input_tokens,
        outputTokens: first.output_tokens + second.output_tokens,
      });
    });
  });

  describe.skipIf(storeCase.skip)("LangChain's ChatOpenAI on the Responses API", () => {
    const assistant = (key: string) =>
      new ChatOpenAI({
        model: 'assistant',
        useResponsesApi: true,
        configuration: { baseURL: `${kiln.url}/v1` },
        apiKey: key,
        maxRetries: 0,
      });
    const getWeather = langchainTool(async ({ city }: { city: string }) => `21 degrees in ${city}`, {
      name: 'get_weather',
      description: 'The weather in a city',
      schema: z.object({ city: z.string() }),
    });

    it('invoke answers an AIMessage with the text and usage Kiln stored', async () => {
      const key = await freshKey();
      const message = await assistant(key).invoke('Describe a kiln.');

      expect(AIMessage.isInstance(message)).toBe(true);
      const [stored] = await storedResponses(key, 1);
      expect(message.id).toBe(stored.id);
      expect(message.text.length).toBeGreaterThan(0);
      expect(message.text).toBe(stored.output_text);
      expect(message.tool_calls).toEqual([]);
      const usage = usageOf(stored);
      expect(message.usage_metadata).toMatchObject({
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        total_tokens: usage.total_tokens,
      });
      expect(usage.input_tokens).toBe(assistantPromptTokens('Describe a kiln.'));
    });

    it('stream: the chunks concatenate to the text Kiln stored', async () => {
      const key = await freshKey();
      const chunks: AIMessageChunk[] = [];
      for await (const chunk of await assistant(key).stream('Say something.')) chunks.push(chunk);

      const pieces = chunks.map((chunk) => chunk.text).filter((text) => text !== '');
      expect(pieces.length).toBeGreaterThan(1);
      const whole = chunks.reduce((sum, chunk) => concat(sum, chunk));
      expect(whole.text).toBe(pieces.join(''));
      const [stored] = await storedResponses(key, 1);
      expect(whole.text).toBe(stored.output_text);
      const usage = usageOf(stored);
      expect(whole.usage_metadata).toMatchObject({
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
      });
    });

    it('bindTools: the AIMessage has the tool call with its parsed args; the ToolMessage sent back gets an answer', async () => {
      const key = await freshKey();
      const model = assistant(key).bindTools([getWeather]);
      const called = await model.invoke(WEATHER_QUESTION);

      expect(called.tool_calls).toEqual([
        expect.objectContaining({ name: 'get_weather', args: { city: 'Lyon' }, id: expect.any(String) }),
      ]);
      const call = called.tool_calls?.[0];
      if (!call) throw new Error('no tool call');
      const output = await getWeather.invoke(call);
      const answer = await model.invoke([new HumanMessage(WEATHER_QUESTION), called, output]);
      expect(answer.tool_calls).toEqual([]);
      expect(answer.text.length).toBeGreaterThan(0);

      const [asked, answered] = await storedResponses(key, 2);
      expect(asked.output).toEqual([
        expect.objectContaining({ type: 'function_call', name: 'get_weather', call_id: call.id }),
      ]);
      expect(await inputItemsOf(key, answered.id)).toMatchObject([
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: WEATHER_QUESTION }] },
        { type: 'function_call', call_id: call.id, name: 'get_weather' },
        { type: 'function_call_output', call_id: call.id, output: '21 degrees in Lyon' },
      ]);
      expect(answered.output_text).toBe(answer.text);
    });
  });
});
