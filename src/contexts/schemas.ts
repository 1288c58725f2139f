import { type Static, Type } from '@sinclair/typebox';

/** The shapes of the context store, shared by the HTTP API and the MCP tools. */

export const NAME_RULE =
  '1–128 characters of A-Z a-z 0-9 . _ / -, not starting with ctx_, with no part between slashes that is . or ..';

export const ContextName = Type.String({
  minLength: 1,
  maxLength: 128,
  // `.` and `..` as a part of the path are left out: URL handling (fetch, curl) folds them away
  // before the request is sent, so such a name could not be read back, and `team/../prod` would
  // reach `prod`.
  pattern: '^(?!ctx_)(?!(?:.*/)?\\.{1,2}(?:/|$))[A-Za-z0-9._/-]+$',
  description: NAME_RULE,
});

export const SaveContextBody = Type.Object(
  {
    name: ContextName,
    content: Type.String({ description: 'UTF-8 text; at most contexts.max_bytes bytes' }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);
export type SaveContextBody = Static<typeof SaveContextBody>;

export const ListContextsQuery = Type.Object(
  {
    prefix: Type.Optional(Type.String({ maxLength: 128 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    after: Type.Optional(Type.String({ maxLength: 128 })),
  },
  { additionalProperties: false },
);
export type ListContextsQuery = Static<typeof ListContextsQuery>;

export const ContextRef = Type.String({
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9._/-]+$',
  description: 'a context id (ctx_…) or name',
});
