import { KilnError } from '../../errors.js';

/** Where the address comes from, named in every message so the operator knows what to edit. */
const SOURCE = 'store.url (KILN_STORE_URL)';

/** What to check, by the driver's error code (a system error or a PostgreSQL SQLSTATE). */
const CHECKS: Record<string, string> = {
  ECONNREFUSED: 'is PostgreSQL running and listening on that host and port?',
  ENOTFOUND: 'is the host name right?',
  EAI_AGAIN: 'is the host name right, and DNS reachable from here?',
  ETIMEDOUT: 'is the host reachable from here (address, port, firewall)?',
  EHOSTUNREACH: 'is the host reachable from here (address, port, firewall)?',
  ENETUNREACH: 'is the host reachable from here (address, port, firewall)?',
  // invalid_password, invalid_authorization_specification (unknown role, pg_hba.conf refusal)
  '28P01': 'check the user name and password in the URL',
  '28000': 'check the user name in the URL, and that pg_hba.conf lets it connect from here',
  // invalid_catalog_name
  '3D000': 'create the database (createdb) or name an existing one in the URL',
  // insufficient_privilege, from CREATE SCHEMA
  '42501': 'the user needs the right to create the schema store.schema names, or the schema must exist',
};

interface Target {
  /** `postgres://user:***@host:port/database`: what Kiln tried, with the password masked. */
  shown: string;
  password: string;
}

/** The connection URL as it may be shown: host, port, database and user, never the password or the query. */
function target(url: string): Target | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  const decode = (s: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  };
  const user = decode(parsed.username);
  const host = parsed.searchParams.get('host') || parsed.hostname || 'localhost';
  const port = parsed.port || '5432';
  const database = decode(parsed.pathname.replace(/^\//, '')) || user;
  const credentials = user ? `${user}${parsed.password ? ':***' : ''}@` : '';
  // A host that is a directory is a Unix socket's: no port to show.
  const socket = host.startsWith('/');
  return {
    shown: `${parsed.protocol}//${credentials}${socket ? '' : `${host}:${port}`}/${database}${
      socket ? ` through the socket in ${host}` : ''
    }`,
    password: decode(parsed.password),
  };
}

/** A PostgreSQL store URL as messages may show it: the password masked, the query left out. */
export const shownStoreUrl = (url: string): string => target(url)?.shown ?? 'the configured postgres:// URL';

/** `text` with every trace of `secret` replaced; a secret under 4 characters would mask ordinary words. */
function scrub(text: string, secrets: string[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join('***');
  }
  return out;
}

/**
 * A failure to open the PostgreSQL store (connect, authenticate, create the schema) as one
 * message: what was tried, that the address comes from store.url / KILN_STORE_URL, the driver's
 * reason and what to check. The password is never in it, and the driver's error (which may hold
 * the whole URL) is not kept as the cause, so no log line can print it either.
 */
export function storeOpenError(url: string, error: unknown): KilnError {
  const tried = target(url);
  const code = (error as { code?: unknown } | null)?.code;
  if (!tried || code === 'ERR_INVALID_URL') {
    return new KilnError(
      'store-unavailable',
      `cannot open the PostgreSQL store: ${SOURCE} is not a valid postgres:// URL (characters such as @ : / # ? % in the password must be percent-encoded)`,
    );
  }
  const raw = error instanceof Error ? error.message : String(error);
  const reason = scrub(raw, [url, tried.password, encodeURIComponent(tried.password)]);
  const check = typeof code === 'string' ? CHECKS[code] : undefined;
  return new KilnError(
    'store-unavailable',
    `cannot open the PostgreSQL store at ${tried.shown} (from ${SOURCE}): ${reason}${check ? `; ${check}` : ''}`,
  );
}
