import { createHash } from 'node:crypto';
import { KilnError, notFound } from '../errors.js';
import type { Store } from '../store/index.js';
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

/** What can be done with an organisation's contexts; the HTTP client implements it too (CLI, stdio MCP). */
export interface ContextsPort {
  save(body: SaveContextBody): Promise<{ context: ContextRecord; created: boolean }>;
  get(idOrName: string): Promise<ContextWithContent>;
  list(query?: ListContextsQuery): Promise<ContextList>;
  delete(idOrName: string): Promise<{ id: string; object: 'context'; deleted: true }>;
}

const seconds = (ms: number) => Math.floor(ms / 1000);

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

  async save(body: SaveContextBody): Promise<{ context: ContextRecord; created: boolean }> {
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
    const { context, created } = await this.store.contexts.save({
      orgId: this.caller.orgId,
      name: body.name,
      content: body.content,
      description: body.description ?? null,
      sizeBytes: bytes,
      sha256: createHash('sha256').update(body.content, 'utf8').digest('hex'),
      createdBy: this.caller.keyId,
    });
    return { context: toRecord(context), created };
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

  async delete(idOrName: string): Promise<{ id: string; object: 'context'; deleted: true }> {
    const id = await this.store.contexts.delete(this.caller.orgId, idOrName);
    if (!id) throw notFound('context', idOrName);
    return { id, object: 'context', deleted: true };
  }
}
