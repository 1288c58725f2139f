import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { errorEnvelope } from '../api/errors.js';
import { assertValid } from '../api/validation.js';
import { GatewayUnreachableError, KilnApiError } from '../client/index.js';
import { ContextRef, ListContextsQuery, SaveContextBody } from '../contexts/schemas.js';
// `etag` and `if_match` are a context's version tag: its HTTP ETag without the quotes JSON would escape.
import { type ContextsPort, versionTag } from '../contexts/service.js';
import { KilnError, validationError } from '../errors.js';
import { VERSION } from '../version.js';

const RESOURCE_SCHEME = 'kiln-context://';
/** MCP's JSON-RPC error code for a resource that does not exist. */
const RESOURCE_NOT_FOUND = -32002;

/** An `etag`: a context's id and version. */
const VERSION_TAG = '^ctx_[0-9a-f]{32}\\.[1-9][0-9]{0,9}$';

const SaveContextArgs = Type.Object(
  {
    ...SaveContextBody.properties,
    create_only: Type.Optional(
      Type.Boolean({
        description:
          'true: save only if no context has this name; an existing one is kept and the call fails',
      }),
    ),
    if_match: Type.Optional(
      Type.String({
        pattern: VERSION_TAG,
        description:
          'the `etag` that get_context or save_context answered: replace the context only if it is still that version. Should someone have saved it since, nothing is saved and the call fails with context-changed and the current version: read it again and redo the edit on it',
      }),
    ),
  },
  { additionalProperties: false },
);
const GetArgs = Type.Object({ id_or_name: ContextRef }, { additionalProperties: false });
const DeleteArgs = Type.Object(
  {
    id_or_name: ContextRef,
    if_match: Type.Optional(
      Type.String({
        pattern: VERSION_TAG,
        description:
          'the `etag` that get_context or save_context answered: delete the context only if it is still that version. Should someone have saved it since, nothing is deleted and the call fails with context-changed and the current version',
      }),
    ),
  },
  { additionalProperties: false },
);

interface Tool<S extends TSchema> {
  description: string;
  schema: S;
  run(contexts: ContextsPort, args: Static<S>): Promise<unknown>;
}

const tool = <S extends TSchema>(t: Tool<S>) => t as unknown as Tool<TSchema>;

/**
 * A refused conditional save in the tool's own terms: `param` names the argument (`create_only`,
 * `if_match`) rather than the HTTP header, and the current context carries its `etag`, ready for the
 * next `if_match`. Anything else is thrown as it is.
 */
function asToolRefusal(error: unknown): unknown {
  const known = error instanceof KilnError || error instanceof KilnApiError ? error : undefined;
  const code = known?.toBody().code;
  if (!known || (code !== 'context-exists' && code !== 'context-changed')) return error;
  const param = code === 'context-exists' ? 'create_only' : 'if_match';
  const attached = known instanceof KilnError ? known.attach : known.attached;
  const current = attached?.context as { id: string; version: number } | undefined;
  const attach = current ? { context: { ...current, etag: versionTag(current) } } : undefined;
  return known instanceof KilnError
    ? new KilnError(code, known.message, { param, ...(attach ? { attach } : {}) })
    : new KilnApiError(known.status, { ...known.body, param }, known.url, known.retryAfter, attach);
}

/**
 * The context store as MCP tools. Inputs are the same schemas the HTTP API validates with. A Map,
 * so a tool name such as `__proto__` or `toString` finds nothing rather than Object's prototype.
 */
const tools = new Map<string, Tool<TSchema>>(
  Object.entries({
    save_context: tool({
      description:
        "Save a named text blob to the organisation's shared context store. Saving an existing name replaces its content and bumps its version, unless `create_only` is true. To edit a shared context, pass the `etag` you read it with as `if_match`, so that a teammate's newer version is never replaced.",
      schema: SaveContextArgs,
      run: async (contexts, { create_only, if_match, ...body }) => {
        if (create_only && if_match !== undefined) {
          throw validationError([
            {
              field: 'if_match',
              rule: 'conflict',
              message:
                'create_only saves a new context and if_match replaces a version of one: give one of them',
            },
          ]);
        }
        const precondition = create_only
          ? { ifNoneMatch: '*' }
          : if_match !== undefined
            ? { ifMatch: `"${if_match}"` }
            : {};
        try {
          const saved = await contexts.save(body, precondition);
          return { ...saved, etag: versionTag(saved.context) };
        } catch (error) {
          throw asToolRefusal(error);
        }
      },
    }),
    get_context: tool({
      description:
        "Fetch a context, with its content, by id (ctx_…) or name. Its `etag` names this version, for save_context's `if_match`.",
      schema: GetArgs,
      run: async (contexts, args) => {
        const context = await contexts.get(args.id_or_name);
        return { ...context, etag: versionTag(context) };
      },
    }),
    list_contexts: tool({
      description:
        "List the organisation's contexts by name (without content). Use `after` with the last name to page.",
      schema: ListContextsQuery,
      run: (contexts, args) => contexts.list(args),
    }),
    delete_context: tool({
      description:
        'Delete a context by id (ctx_…) or name. With `if_match` (the `etag` you read it with), only while it is still that version, so that a teammate’s newer version is never deleted unseen.',
      schema: DeleteArgs,
      run: (contexts, { id_or_name, if_match }) =>
        contexts
          .delete(id_or_name, if_match === undefined ? undefined : `"${if_match}"`)
          .catch((error: unknown) => {
            throw asToolRefusal(error);
          }),
    }),
  }),
);

function failure(error: unknown): CallToolResult {
  // Anything that is not one of Kiln's own errors may carry internals (SQL, paths): never show it.
  // A gateway `kiln mcp` cannot reach is said as such, with the URL: no log anywhere knows more.
  const known =
    error instanceof KilnError || error instanceof KilnApiError || error instanceof GatewayUnreachableError
      ? error
      : new KilnError('internal-error', 'the tool failed unexpectedly; the gateway logs say why');
  // The same envelope as HTTP, `param` included, and what HTTP attaches beside it (a 412's `context`).
  const attached =
    known instanceof KilnError ? known.attach : known instanceof KilnApiError ? known.attached : undefined;
  const envelope = { ...attached, ...errorEnvelope(known) };
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(envelope) }] };
}

/**
 * An MCP server over one organisation's contexts. `contexts` is the in-process store for the
 * gateway's /mcp endpoint, or the HTTP client for `kiln mcp` over stdio: the same tools either way.
 */
export function createMcpServer(contexts: ContextsPort): Server {
  const server = new Server(
    { name: 'kiln', version: VERSION },
    {
      capabilities: { tools: {}, resources: {} },
      instructions:
        "Kiln's context store: named text blobs (specs, schemas, runbooks, prompt preambles) shared by everyone in the organisation.",
    },
  );

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [...tools].map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: t.schema as unknown as { type: 'object' },
    })),
  }));

  server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
    const t = tools.get(request.params.name);
    // MCP's answer to an unknown tool: a JSON-RPC "invalid params" error, not a tool result.
    if (!t) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    try {
      const args = assertValid(t.schema, request.params.arguments ?? {});
      const result = await t.run(contexts, args);
      return {
        content: [{ type: 'text', text: JSON.stringify(result, null, 2) }],
        structuredContent: result as never,
      };
    } catch (error) {
      return failure(error);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async (request) => {
    const cursor = request.params?.cursor;
    const query = { limit: 100, ...(cursor ? { after: cursor } : {}) };
    try {
      assertValid(ListContextsQuery, query, 'params');
    } catch (error) {
      if (!(error instanceof KilnError)) throw error;
      throw new McpError(
        ErrorCode.InvalidParams,
        'cursor is not a context name this server could have issued',
      );
    }
    const page = await contexts.list(query);
    const last = page.data[page.data.length - 1];
    return {
      resources: page.data.map((c) => ({
        uri: `${RESOURCE_SCHEME}${c.id}`,
        name: c.name,
        ...(c.description ? { description: c.description } : {}),
        mimeType: 'text/plain',
        size: c.size_bytes,
      })),
      ...(page.has_more && last ? { nextCursor: last.name } : {}),
    };
  });

  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: `${RESOURCE_SCHEME}{id_or_name}`,
        name: 'context',
        description: 'A context of the organisation, by id (ctx_…) or name',
        mimeType: 'text/plain',
      },
    ],
  }));

  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const { uri } = request.params;
    if (!uri.startsWith(RESOURCE_SCHEME)) {
      throw new McpError(
        RESOURCE_NOT_FOUND,
        `unknown resource ${uri}; context URIs start with ${RESOURCE_SCHEME}`,
        { uri },
      );
    }
    try {
      // A reference no context can have (a NUL, a space) is not found, without asking the store.
      const ref = assertValid<string>(ContextRef, decodedRef(uri.slice(RESOURCE_SCHEME.length)), 'uri');
      const context = await contexts.get(ref);
      return { contents: [{ uri, mimeType: 'text/plain', text: context.content }] };
    } catch (error) {
      const code =
        error instanceof KilnError || error instanceof KilnApiError ? error.toBody().code : undefined;
      if (code === 'not-found' || code === 'validation-failed') {
        throw new McpError(RESOURCE_NOT_FOUND, (error as Error).message, { uri });
      }
      throw error;
    }
  });

  return server;
}

/** A resource URI's reference, percent-decoded; a malformed escape is no reference (not found). */
function decodedRef(encoded: string): string {
  try {
    return decodeURIComponent(encoded);
  } catch {
    // A NUL: ContextRef refuses it, so the caller answers not found.
    return '\u0000';
  }
}
