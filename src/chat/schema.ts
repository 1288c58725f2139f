import { type Static, Type } from '@sinclair/typebox';
import { Webhook } from '../jobs/schemas.js';

const Message = Type.Object(
  {
    role: Type.Union(
      ['system', 'developer', 'user', 'assistant', 'tool', 'function'].map((r) => Type.Literal(r)),
    ),
    content: Type.Optional(
      Type.Union([Type.String(), Type.Array(Type.Object({ type: Type.String() })), Type.Null()]),
    ),
    name: Type.Optional(Type.String()),
    tool_calls: Type.Optional(Type.Array(Type.Object({}))),
    tool_call_id: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

/**
 * A function tool as OpenAI's chat completions take it. Checked here rather than left to the engine:
 * llama.cpp answers a malformed tool with a 500, which would count against its replica's health.
 */
const Tool = Type.Object(
  {
    type: Type.Literal('function'),
    function: Type.Object(
      {
        name: Type.String({ minLength: 1, maxLength: 256 }),
        description: Type.Optional(Type.String()),
        parameters: Type.Optional(Type.Object({}, { additionalProperties: true })),
        strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
      },
      { additionalProperties: true },
    ),
  },
  { additionalProperties: true },
);

const ToolChoice = Type.Union([
  Type.Literal('none'),
  Type.Literal('auto'),
  Type.Literal('required'),
  Type.Object(
    {
      type: Type.Literal('function'),
      function: Type.Object({ name: Type.String({ minLength: 1 }) }, { additionalProperties: true }),
    },
    { additionalProperties: true },
  ),
  Type.Null(),
]);

/**
 * The OpenAI chat-completions body plus Kiln's `mode`, `webhook` and `contexts`. Fields Kiln does
 * not know pass through to the engine, as OpenAI clients send many.
 */
export const ChatBody = Type.Object(
  {
    model: Type.String({
      minLength: 1,
      maxLength: 256,
      description: 'a persona, or a model the fleet serves',
    }),
    messages: Type.Array(Message, { minItems: 1 }),
    mode: Type.Optional(Type.Union([Type.Literal('sync'), Type.Literal('stream'), Type.Literal('async')])),
    stream: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    stream_options: Type.Optional(
      Type.Union([
        Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true }),
        Type.Null(),
      ]),
    ),
    webhook: Type.Optional(Webhook),
    contexts: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 32 })),
    n: Type.Optional(
      Type.Union([
        Type.Integer({
          minimum: 1,
          maximum: 16,
          description: 'choices to generate, passed to the engine (vLLM, SGLang and llama.cpp serve n > 1)',
        }),
        Type.Null(),
      ]),
    ),
    temperature: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 2 }), Type.Null()])),
    top_p: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()])),
    max_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
    max_completion_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
    stop: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 4 }), Type.Null()])),
    seed: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
    user: Type.Optional(Type.String()),
    tools: Type.Optional(Type.Union([Type.Array(Tool, { maxItems: 128 }), Type.Null()])),
    tool_choice: Type.Optional(ToolChoice),
    parallel_tool_calls: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  },
  { additionalProperties: true },
);
export type ChatBody = Static<typeof ChatBody>;

/** What a chat job stores: the caller's body without Kiln's own fields. */
export interface ChatJobRequest {
  model: string;
  contexts: string[];
  includeUsage: boolean;
  body: Record<string, unknown>;
  /**
   * Characters the persona's preamble and the contexts put before the messages at submission: the
   * reservation counts them (absent in jobs submitted before it was kept).
   */
  preambleChars?: number;
  /** The persona's default output limit at submission: reserved when the caller sets none. */
  personaMaxTokens?: number;
}
