import { describe, expect, it } from 'vitest';
import { addUsage } from '../../src/engines/openai/call.js';

describe('two choices’ usage as one request’s', () => {
  it('counts the prompt once and adds the completions, their details too', () => {
    const one = {
      prompt_tokens: 40,
      completion_tokens: 6,
      total_tokens: 46,
      prompt_tokens_details: { cached_tokens: 32 },
      completion_tokens_details: { reasoning_tokens: 2 },
    };
    const two = {
      prompt_tokens: 40,
      completion_tokens: 9,
      total_tokens: 49,
      prompt_tokens_details: { cached_tokens: 40 },
      completion_tokens_details: { reasoning_tokens: 5, accepted_prediction_tokens: 1 },
    };
    expect(addUsage(addUsage(undefined, one), two)).toEqual({
      prompt_tokens: 40,
      completion_tokens: 15,
      total_tokens: 55,
      prompt_tokens_details: { cached_tokens: 32 },
      completion_tokens_details: { reasoning_tokens: 7, accepted_prediction_tokens: 1 },
    });
  });

  it('adds nothing for a count an engine left out', () => {
    const partial = { prompt_tokens: 10, completion_tokens: 'n/a' } as never;
    expect(addUsage({ prompt_tokens: 10, completion_tokens: 4, total_tokens: 14 }, partial)).toMatchObject({
      prompt_tokens: 10,
      completion_tokens: 4,
      total_tokens: 14,
    });
  });
});
