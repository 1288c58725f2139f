/** What a gateway answered: its status, its body parsed as JSON (the text when it is not JSON; undefined when empty) and its headers. */
export interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

/** `method route` on a gateway at `base` with `key`, a JSON body when one is given. */
export async function callGateway(
  base: string,
  key: string,
  method: string,
  route: string,
  body?: unknown,
): Promise<Answer> {
  const response = await fetch(`${base}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  let parsed: unknown = text || undefined;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed, headers: response.headers };
}

/**
 * The status of a GET of `url`, its body read to the end. A body left unread can hold the
 * server's side of the connection open (a 2 MB image does not fit the socket's buffers), and a
 * server being closed waits its whole shutdown grace for it.
 */
export async function statusOf(url: string): Promise<number> {
  const response = await fetch(url);
  await response.arrayBuffer();
  return response.status;
}
