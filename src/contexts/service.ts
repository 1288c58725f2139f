import { createHash } from 'node:crypto';
import { KilnError, notFound, validationError } from '../errors.js';
import type { Store } from '../store/index.js';
import type { SaveCondition } from '../store/repos/contexts.js';
import type { Context, ContextMeta, Page } from '../store/types.js';
import type { ListContextsQuery, SaveContextBody } from './schemas.js';

/** A context as every client sees it (HTTP, CLI, MCP). Times are Unix seconds. */
export interface ContextRecord {
  id: string;
  object: 'context';
  name: string;
  description: string | null;
  size_bytes: number;
  sha256: string;
  version: number;
  shared: 'org';
  created_at: number;
  updated_at: number;
  created_by: string;
}

export interface ContextWithContent extends ContextRecord {
  content: string;
}

export interface ContextList {
  object: 'list';
  data: ContextRecord[];
  has_more: boolean;
}

/**
 * What must hold for a save to happen, as HTTP's conditional headers say it: `ifNoneMatch: '*'`
 * creates only; `ifMatch` replaces only a context whose ETag is among those listed (`*`: any).
 */
export interface SavePrecondition {
  ifNoneMatch?: string | undefined;
  ifMatch?: string | undefined;
}

/** What can be done with an organisation's contexts; the HTTP client implements it too (CLI, stdio MCP). */
export interface ContextsPort {
  save(
    body: SaveContextBody,
    precondition?: SavePrecondition,
  ): Promise<{ context: ContextRecord; created: boolean }>;
  get(idOrName: string): Promise<ContextWithContent>;
  list(query?: ListContextsQuery): Promise<ContextList>;
  delete(
    idOrName: string,
    /** `If-Match`: delete only while the context is one of these versions (or, with `*`, exists). */
    ifMatch?: string,
  ): Promise<{ id: string; object: 'context'; deleted: true }>;
}

const seconds = (ms: number) => Math.floor(ms / 1000);

/** A context's id and version, which together name one content (a re-created name has a new id). */
export const versionTag = (context: { id: string; version: number }): string =>
  `${context.id}.${context.version}`;

/** A context's ETag: its version tag, quoted. */
export const etagOf = (context: { id: string; version: number }): string => `"${versionTag(context)}"`;

const ETAG = /^(W\/)?"([\x21\x23-\x7e]*)"$/;
const OURS = /^(ctx_[0-9a-f]{32})\.([1-9][0-9]{0,9})$/;
/** The highest version a context can reach: `contexts.version` is a 32-bit integer on PostgreSQL. */
const MAX_VERSION = 2_147_483_647;

function badHeader(header: string, message: string, received: string): KilnError {
  return validationError([{ field: header, rule: 'precondition', message, received }]);
}

/** The store's condition for a save, from its conditional headers; 400 for one it cannot read. */
export function saveCondition(precondition: SavePrecondition = {}): SaveCondition | undefined {
  const { ifNoneMatch, ifMatch } = precondition;
  if (ifNoneMatch !== undefined && ifMatch !== undefined) {
    throw badHeader(
      'If-Match',
      'send If-None-Match: * (create only) or If-Match (replace only), not both',
      ifMatch,
    );
  }
  if (ifNoneMatch !== undefined) {
    if (ifNoneMatch.trim() !== '*') {
      throw badHeader(
        'If-None-Match',
        'a save takes If-None-Match: * only: create, never replace',
        ifNoneMatch,
      );
    }
    return { kind: 'absent' };
  }
  if (ifMatch === undefined) return undefined;
  if (ifMatch.trim() === '*') return { kind: 'present' };
  const tags: Array<{ id: string; version: number }> = [];
  for (const part of ifMatch.split(',')) {
    const tag = ETAG.exec(part.trim());
    if (!tag) {
      throw badHeader(
        'If-Match',
        'If-Match takes * or ETags in double quotes, as a context\u2019s ETag header gives them',
        ifMatch,
      );
    }
    // A weak tag never matches (If-Match compares strongly); another gateway's tag names no context here.
    const ours = tag[1] ? undefined : OURS.exec(tag[2] as string);
    // Past the highest version, a tag names no context (and PostgreSQL would refuse the number).
    if (ours && Number(ours[2]) <= MAX_VERSION)
      tags.push({ id: ours[1] as string, version: Number(ours[2]) });
  }
  return { kind: 'match', tags };
}

export function toRecord(meta: ContextMeta): ContextRecord {
  return {
    id: meta.id,
    object: 'context',
    name: meta.name,
    description: meta.description,
    size_bytes: meta.size_bytes,
    sha256: meta.sha256,
    version: meta.version,
    shared: 'org',
    created_at: seconds(meta.created_at),
    updated_at: seconds(meta.updated_at),
    created_by: meta.created_by,
  };
}

function withContent(context: Context): ContextWithContent {
  return { ...toRecord(context), content: context.content };
}

function toList(page: Page<ContextMeta>): ContextList {
  return { object: 'list', data: page.data.map(toRecord), has_more: page.has_more };
}

/** The context store's rules for one organisation, acting as one key. Input shapes are validated before. */
export class OrgContexts implements ContextsPort {
  constructor(
    private readonly store: Store,
    private readonly maxBytes: number,
    private readonly caller: { orgId: string; keyId: string },
  ) {}

  async save(
    body: SaveContextBody,
    precondition?: SavePrecondition,
  ): Promise<{ context: ContextRecord; created: boolean }> {
    const condition = saveCondition(precondition);
    const bytes = Buffer.byteLength(body.content, 'utf8');
    if (bytes > this.maxBytes) {
      throw new KilnError(
        'context-too-large',
        `content is ${bytes} bytes; the limit is ${this.maxBytes} bytes (contexts.max_bytes). Nothing was stored.`,
        {
          details: [
            {
              field: 'content',
              rule: 'max_bytes',
              limit: this.maxBytes,
              received: bytes,
              message: `content must be at most ${this.maxBytes} UTF-8 bytes`,
            },
          ],
        },
      );
    }
    const saved = await this.store.contexts.save(
      {
        orgId: this.caller.orgId,
        name: body.name,
        content: body.content,
        description: body.description ?? null,
        sizeBytes: bytes,
        sha256: createHash('sha256').update(body.content, 'utf8').digest('hex'),
        createdBy: this.caller.keyId,
      },
      condition,
    );
    if (!saved) throw await this.#notSaved(body.name, condition as SaveCondition);
    return { context: toRecord(saved.context), created: saved.created };
  }

  /** Why a conditional save did not happen: 412, with the context as it stands when there is one. */
  async #notSaved(name: string, condition: SaveCondition): Promise<KilnError> {
    const current = await this.store.contexts.get(this.caller.orgId, name);
    const code = condition.kind === 'absent' ? 'context-exists' : 'context-changed';
    const param = condition.kind === 'absent' ? 'If-None-Match' : 'If-Match';
    if (!current) {
      const gone =
        condition.kind === 'absent'
          ? `a context named '${name}' existed when this save ran and has been deleted since`
          : `no context named '${name}' exists now: it was deleted, or never saved`;
      return new KilnError(code, `${gone}. Nothing was saved.`, { param });
    }
    const at = `version ${current.version}, ETag ${etagOf(current)}, saved ${new Date(current.updated_at).toISOString()}`;
    const why =
      condition.kind === 'absent'
        ? `a context named '${name}' exists already (${at})`
        : `context '${name}' is not the version this save was based on: it is at ${at}`;
    return new KilnError(code, `${why}. Nothing was saved.`, {
      param,
      attach: { context: toRecord(current) },
    });
  }

  async get(idOrName: string): Promise<ContextWithContent> {
    const context = await this.store.contexts.get(this.caller.orgId, idOrName);
    if (!context) throw notFound('context', idOrName);
    return withContent(context);
  }

  async list(query: ListContextsQuery = {}): Promise<ContextList> {
    const page = await this.store.contexts.list(this.caller.orgId, {
      limit: query.limit ?? 20,
      ...(query.prefix ? { prefix: query.prefix } : {}),
      ...(query.after ? { after: query.after } : {}),
    });
    return toList(page);
  }

  async delete(
    idOrName: string,
    ifMatch?: string,
  ): Promise<{ id: string; object: 'context'; deleted: true }> {
    const condition = ifMatch === undefined ? undefined : saveCondition({ ifMatch });
    const tags = condition?.kind === 'match' ? condition.tags : undefined;
    const id = await this.store.contexts.delete(this.caller.orgId, idOrName, tags);
    if (id) return { id, object: 'context', deleted: true };
    const current = tags && (await this.store.contexts.get(this.caller.orgId, idOrName));
    if (!current) throw notFound('context', idOrName);
    const at = `version ${current.version}, ETag ${etagOf(current)}, saved ${new Date(current.updated_at).toISOString()}`;
    throw new KilnError(
      'context-changed',
      `context '${current.name}' is not the version this delete was based on: it is at ${at}. Nothing was deleted.`,
      { param: 'If-Match', attach: { context: toRecord(current) } },
    );
  }
}
