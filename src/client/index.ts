import type { ListContextsQuery, SaveContextBody } from '../contexts/schemas.js';
import type { ContextList, ContextRecord, ContextsPort, ContextWithContent } from '../contexts/service.js';
import type { ErrorBody } from '../errors.js';

export type { ContextList, ContextRecord, ContextWithContent } from '../contexts/service.js';

/** A non-2xx answer from the gateway, carrying its error envelope. */
export class KilnApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message);
    this.name = 'KilnApiError';
  }

  toBody(): ErrorBody {
    return this.body;
  }
}

export interface ClientOptions {
  baseUrl: string;
  apiKey: string;
  fetch?: typeof fetch;
}

/** A typed client for Kiln's HTTP API; the CLI and `kiln mcp` use it, and so can anyone. */
export class KilnClient {
  readonly contexts: ContextsPort;
  readonly #baseUrl: string;
  readonly #apiKey: string;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.#baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.#apiKey = options.apiKey;
    this.#fetch = options.fetch ?? fetch;
    this.contexts = {
      save: async (body: SaveContextBody) => {
        const { status, data } = await this.#call<ContextRecord>('POST', '/api/v1/contexts', body);
        return { context: data, created: status === 201 };
      },
      get: async (idOrName: string) =>
        (await this.#call<ContextWithContent>('GET', `/api/v1/contexts/${encodeURIComponent(idOrName)}`))
          .data,
      list: async (query: ListContextsQuery = {}) => {
        const search = new URLSearchParams();
        for (const [k, v] of Object.entries(query)) if (v !== undefined) search.set(k, String(v));
        const qs = search.size ? `?${search}` : '';
        return (await this.#call<ContextList>('GET', `/api/v1/contexts${qs}`)).data;
      },
      delete: async (idOrName: string) =>
        (
          await this.#call<{ id: string; object: 'context'; deleted: true }>(
            'DELETE',
            `/api/v1/contexts/${encodeURIComponent(idOrName)}`,
          )
        ).data,
    };
  }

  async #call<T>(method: string, path: string, body?: unknown): Promise<{ status: number; data: T }> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.#apiKey}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const response = await this.#fetch(`${this.#baseUrl}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    let data: unknown;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      data = undefined;
    }
    if (!response.ok) {
      const envelope = (data as { error?: ErrorBody } | undefined)?.error;
      throw new KilnApiError(
        response.status,
        envelope ?? {
          type: 'http_error',
          code: `http-${response.status}`,
          message: text.slice(0, 200) || response.statusText,
        },
      );
    }
    return { status: response.status, data: data as T };
  }
}

export { verifyWebhook } from './webhooks.js';
