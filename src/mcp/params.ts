import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  InitializeRequestSchema,
  isJSONRPCRequest,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  PingRequestSchema,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

/** The requests the server answers, by method: the SDK's own schemas for them. */
const REQUESTS = new Map(
  [
    InitializeRequestSchema,
    PingRequestSchema,
    ListToolsRequestSchema,
    CallToolRequestSchema,
    ListResourcesRequestSchema,
    ListResourceTemplatesRequestSchema,
    ReadResourceRequestSchema,
  ].map((schema) => [schema.shape.method.value as string, schema]),
);

/**
 * Why a JSON-RPC request's params do not fit its method, in words (`params.arguments: expected
 * record, received null`); undefined when they do, or when the server does not answer the method.
 */
export function invalidParams(message: unknown): string | undefined {
  if (!isJSONRPCRequest(message)) return undefined;
  const schema = REQUESTS.get(message.method);
  const parsed = schema?.safeParse(message);
  if (!parsed || parsed.success) return undefined;
  const problems = parsed.error.issues.map(
    (issue) => `${issue.path.join('.') || 'params'}: ${issue.message.replace(/^Invalid input: /, '')}`,
  );
  return `Invalid params: ${problems.join('; ')}`;
}

/**
 * Answers a request whose params do not fit its method with JSON-RPC's -32602 Invalid params,
 * saying what is wrong, before the server sees it: the SDK would parse them itself and answer
 * -32603 Internal error with its validator's raw report, as if the gateway had failed.
 */
export function refuseInvalidParams(transport: Transport): void {
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const problem = invalidParams(message);
    if (problem === undefined || !isJSONRPCRequest(message)) return deliver?.(message, extra);
    // A send can fail (a batch that repeats an id has its answer sent already): said as the SDK
    // says its own, never an unhandled rejection, which would end the process.
    transport
      .send({ jsonrpc: '2.0', id: message.id, error: { code: ErrorCode.InvalidParams, message: problem } })
      .catch((error: unknown) =>
        transport.onerror?.(error instanceof Error ? error : new Error(String(error))),
      );
  };
}
