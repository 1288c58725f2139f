import { type Static, Type } from '@sinclair/typebox';
import { Webhook } from '../jobs/schemas.js';

const nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Optional(Type.Union([schema, Type.Null()]));

/** An input item; its variants are checked one by one in input.ts, with errors that name the item. */
// A null type is none (OpenAI's item references may send one).
const InputItem = Type.Object(
  { type: Type.Optional(Type.Union([Type.String(), Type.Null()])) },
  { additionalProperties: true },
);

const Tool = Type.Object({ type: Type.String() }, { additionalProperties: true });

/**
 * `POST /v1/responses`: the fields a chat engine can honour, plus Kiln's `contexts` and `webhook`.
 * Fields OpenAI clients send that change nothing here (`include`, `service_tier`,
 * `prompt_cache_key`, `reasoning`, `safety_identifier`, `stream_options`) are accepted and ignored;
 * those that ask for what Kiln cannot do (`conversation`, `prompt`) are refused in the route.
 */
export const ResponseBody = Type.Object(
  {
    model: Type.String({
      minLength: 1,
      maxLength: 256,
      description: 'a persona, or a model the fleet serves',
    }),
    // Optional, as in OpenAI's API: a turn that continues a response may send nothing new.
    input: Type.Optional(Type.Union([Type.String(), Type.Array(InputItem, { maxItems: 4096 })])),
    instructions: nullable(Type.String()),
    previous_response_id: nullable(Type.String({ minLength: 1, maxLength: 128 })),
    store: nullable(Type.Boolean()),
    background: nullable(Type.Boolean()),
    stream: nullable(Type.Boolean()),
    tools: Type.Optional(Type.Array(Tool, { maxItems: 128 })),
    tool_choice: Type.Optional(Type.Union([Type.String(), Type.Object({ type: Type.String() })])),
    parallel_tool_calls: nullable(Type.Boolean()),
    text: nullable(
      Type.Object(
        {
          format: Type.Optional(
            Type.Object(
              {
                type: Type.Union([
                  Type.Literal('text'),
                  Type.Literal('json_object'),
                  Type.Literal('json_schema'),
                ]),
                name: Type.Optional(
                  Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
                ),
                schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
                description: Type.Optional(Type.String()),
                strict: nullable(Type.Boolean()),
              },
              { additionalProperties: false },
            ),
          ),
          verbosity: nullable(Type.String()),
        },
        { additionalProperties: false },
      ),
    ),
    max_output_tokens: nullable(Type.Integer({ minimum: 1 })),
    truncation: nullable(Type.Union([Type.Literal('auto'), Type.Literal('disabled')])),
    temperature: nullable(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: nullable(Type.Number({ minimum: 0, maximum: 1 })),
    metadata: nullable(
      // OpenAI's limits: 16 pairs, keys of at most 64 characters, values of at most 512. TypeBox puts
      // no bound on a record's keys itself, hence propertyNames.
      Type.Record(Type.String(), Type.String({ maxLength: 512 }), {
        maxProperties: 16,
        propertyNames: { maxLength: 64 },
      }),
    ),
    user: Type.Optional(Type.String({ maxLength: 256 })),
    webhook: Type.Optional(Webhook),
    contexts: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 32 })),
  },
  { additionalProperties: true },
);
type Loose<T> = T & Record<string, unknown>;
/** The body, with the loosely checked parts typed as the open objects they are. */
export type ResponseBody = Omit<Static<typeof ResponseBody>, 'input' | 'tools' | 'tool_choice'> & {
  input?: string | Array<Loose<{ type?: string | null }>>;
  tools?: Array<Loose<{ type: string }>>;
  tool_choice?: string | Loose<{ type: string }>;
};

/** An output or input item as the Response object and `input_items` show it. */
export type Item = Record<string, unknown> & { type: string; id?: string };

/** What a `response` job stores: the caller's input as items with ids, and what the engine is sent. */
export interface ResponseJobRequest {
  model: string;
  contexts: string[];
  /** This turn's input, as items with ids (what `input_items` lists). */
  input: Item[];
  instructions: string | null;
  /** The bare UUID of the response this one continues. */
  previous: string | null;
  /** The chat-completions fields the input does not give: tools, tool_choice, response_format, limits. */
  chat: Record<string, unknown>;
  /** The request's fields as the Response object echoes them. */
  echo: ResponseEcho;
  /**
   * Characters the persona's preamble, the contexts and the conversation before this turn put before
   * its input at submission: the reservation counts them (absent in jobs submitted before).
   */
  preambleChars?: number;
  /** The persona's default output limit at submission: reserved when the caller sets none. */
  personaMaxTokens?: number;
}

/** The request fields every Response object carries, whatever its status. */
export interface ResponseEcho {
  background: boolean;
  store: boolean;
  stream: boolean;
  instructions: string | null;
  max_output_tokens: number | null;
  metadata: Record<string, string>;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  temperature: number | null;
  top_p: number | null;
  /** Absent in jobs submitted before Kiln honoured it: `disabled`. */
  truncation?: 'auto' | 'disabled';
  text: { format: Record<string, unknown> };
  tool_choice: unknown;
  tools: unknown[];
  user: string | null;
}
