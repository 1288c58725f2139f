import { type Static, Type } from '@sinclair/typebox';

/** Request pieces every generation endpoint shares. */

export const Webhook = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: 2048,
      description: 'an http(s) URL the terminal job is POSTed to',
    }),
    secret: Type.Optional(
      // No rule of length but not empty: the spec sets none, and the receiver picks its own key.
      Type.String({ minLength: 1, maxLength: 256, description: 'HMAC key for X-Service-Signature' }),
    ),
  },
  { additionalProperties: false },
);
export type Webhook = Static<typeof Webhook>;

export const Mode = (modes: readonly string[]) => Type.Union(modes.map((m) => Type.Literal(m)));

export const JOB_STATUSES = ['queued', 'running', 'completed', 'failed', 'cancelled', 'timeout'] as const;

export const ListJobsQuery = Type.Object(
  {
    status: Type.Optional(Type.Union(JOB_STATUSES.map((s) => Type.Literal(s)))),
    kind: Type.Optional(Type.String({ maxLength: 64 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    after: Type.Optional(Type.String({ maxLength: 128, description: 'the last id of the previous page' })),
  },
  { additionalProperties: false },
);
export type ListJobsQuery = Static<typeof ListJobsQuery>;

export const UsageQuery = Type.Object(
  {
    since: Type.Optional(Type.Integer({ minimum: 0, description: 'Unix seconds, inclusive' })),
    until: Type.Optional(Type.Integer({ minimum: 0, description: 'Unix seconds, exclusive' })),
  },
  { additionalProperties: false },
);
export type UsageQuery = Static<typeof UsageQuery>;
