/** The gateway's API as the console calls it: same origin, the signed-in key as the bearer. */

const KEY = 'kiln.console.key';

/** The key lives in this tab's session storage only: closing the tab signs out. */
export const storedKey = (): string | null => sessionStorage.getItem(KEY);
export const storeKey = (key: string | null): void =>
  key ? sessionStorage.setItem(KEY, key) : sessionStorage.removeItem(KEY);

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The whole answer: some errors attach fields beside `error` (a refused save's `context`). */
    readonly body?: Record<string, unknown>,
  ) {
    super(message);
  }
}

let keyRejected = (): void => {};
/**
 * Called when the API answers 401 to the stored key (revoked, or unknown): the key is forgotten
 * first, so the page can only go back to signing in.
 */
export const onKeyRejected = (listener: () => void): void => {
  keyRejected = listener;
};

/** The ApiError for a failed answer; a 401 to the stored key also signs the tab out. */
function failure(
  status: number,
  envelope: { error?: { code?: string; message?: string } } | undefined,
  key: string | null,
) {
  if (status === 401 && key && key === storedKey()) {
    storeKey(null);
    keyRejected();
  }
  const error = envelope?.error ?? {};
  return new ApiError(
    status,
    error.code ?? 'error',
    error.message ?? `HTTP ${status}`,
    envelope as Record<string, unknown> | undefined,
  );
}

/** A JSON call; a non-2xx answer throws ApiError with the envelope's code and message. */
export async function api<T = unknown>(
  method: string,
  path: string,
  body?: unknown,
  key = storedKey(),
  extraHeaders: Record<string, string> = {},
): Promise<T> {
  const headers: Record<string, string> = { ...extraHeaders, accept: 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : undefined;
  if (!response.ok) throw failure(response.status, parsed, key);
  return parsed as T;
}

/** A chat completion streamed as server-sent events: `onText` gets each piece of content. */
export async function streamChat(
  body: Record<string, unknown>,
  onText: (text: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const key = storedKey();
  const response = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
    ...(signal ? { signal } : {}),
  });
  if (!response.ok || !response.body)
    throw failure(response.status, await response.json().catch(() => undefined), key);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += value;
    let end = buffered.indexOf('\n\n');
    while (end >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf('\n\n');
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error)
          throw new ApiError(502, chunk.error.code ?? 'error', chunk.error.message ?? 'stream failed');
        const text = chunk.choices?.[0]?.delta?.content;
        if (text) onText(text);
      }
    }
  }
}

/** A file as a data: URI, as the media endpoints take images. */
export const dataUri = (file: File): Promise<string> =>
  new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });

export interface Session {
  key: { id: string; prefix: string; name: string | null; role: 'admin' | 'member'; tier: string };
  org: { id: string; name: string };
  contexts_max_bytes: number;
}

export const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'timeout']);

export const when = (seconds: number | null | undefined): string =>
  seconds ? new Date(seconds * 1000).toLocaleString() : '—';
