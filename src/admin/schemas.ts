import { type Static, Type } from '@sinclair/typebox';
import { LIMIT_NAMES, LimitsSchema } from '../limits/schema.js';

/** An organisation's name: what the CLI and the admin API both accept. */
export const ORG_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** A key's label: what the CLI and the admin API both accept (one line, so `kiln keys list` shows it). */
export const KEY_NAME = /^\P{Cc}{1,200}$/u;
const KEY_NAME_ALLOWED = '1–200 characters, none of them a control character (tab, newline)';

const OrgName = Type.String({
  pattern: ORG_NAME.source,
  allowed: '1–64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit',
});
const Tier = Type.Union([Type.Literal('free'), Type.Literal('standard')]);
const Role = Type.Union([Type.Literal('member'), Type.Literal('admin')]);

/** A change of limits: a whole number sets one, null removes it. */
export const LimitsChange = Type.Object(
  Object.fromEntries(
    LIMIT_NAMES.map((name) => [
      name,
      Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 1e12 }), Type.Null()])),
    ]),
  ),
  { additionalProperties: false },
);
export type LimitsChange = Static<typeof LimitsChange>;

export const CreateOrgBody = Type.Object(
  { name: OrgName, limits: Type.Optional(LimitsSchema) },
  { additionalProperties: false },
);
export type CreateOrgBody = Static<typeof CreateOrgBody>;

export const UpdateOrgBody = Type.Object({ limits: LimitsChange }, { additionalProperties: false });
export type UpdateOrgBody = Static<typeof UpdateOrgBody>;

export const CreateKeyBody = Type.Object(
  {
    org: OrgName,
    tier: Type.Optional(Tier),
    role: Type.Optional(Role),
    name: Type.Optional(Type.String({ pattern: KEY_NAME.source, description: KEY_NAME_ALLOWED })),
    limits: Type.Optional(LimitsSchema),
  },
  { additionalProperties: false },
);
export type CreateKeyBody = Static<typeof CreateKeyBody>;

export const UpdateKeyBody = Type.Object(
  { tier: Type.Optional(Tier), limits: Type.Optional(LimitsChange) },
  { additionalProperties: false, minProperties: 1 },
);
export type UpdateKeyBody = Static<typeof UpdateKeyBody>;

export const ListKeysQuery = Type.Object({ org: Type.Optional(OrgName) }, { additionalProperties: false });
export type ListKeysQuery = Static<typeof ListKeysQuery>;

export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
export const OrgParams = Type.Object({ name: OrgName });
