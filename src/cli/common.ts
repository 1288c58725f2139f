import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { GatewayUnreachableError, JobPollError, KilnApiError, KilnClient } from '../client/index.js';
import { ConfigError } from '../config/error.js';
import { KilnError } from '../errors.js';

/** A mistake the user can fix; printed as one clear line without a stack. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/**
 * The server-side configuration, as `kiln serve` would read it (the global --config included).
 * Loaded on use, as is everything heavy here: a `kiln` command that needs no configuration (the
 * client commands, --help) starts sooner without the schema and its validator (bench/cli.ts).
 */
export async function serverConfig(command: Command) {
  const { loadConfig } = await import('../config/load.js');
  return loadConfig({ file: command.optsWithGlobals<{ config?: string }>().config });
}

const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';

/** POSTs that wait for their work (a sync chat or image request, a stream's first token) as long as it takes. */
const WAITS_FOR_WORK = /\/v1\/(chat\/completions|images\/generations|responses)$/;

/**
 * fetch for the CLI: a request that waits for work may take as long as the work to start its answer
 * (the gateway bounds the work); any other must start it within `KILN_TIMEOUT` seconds (default
 * 60), and no answer may pause longer than that once started, so that a gateway that accepts
 * connections but never answers fails clearly rather than after Node's five minutes. Node's own
 * fetch would also cut a sync request at five minutes.
 */
function cliFetch(env: NodeJS.ProcessEnv): typeof fetch {
  const seconds = env.KILN_TIMEOUT === undefined || env.KILN_TIMEOUT === '' ? 60 : Number(env.KILN_TIMEOUT);
  if (!(seconds > 0) || !Number.isFinite(seconds)) {
    throw new UsageError(`KILN_TIMEOUT must be a number of seconds above 0; it is "${env.KILN_TIMEOUT}"`);
  }
  const ms = Math.ceil(seconds * 1000);
  // Work answers once its output is ready, and then the body flows (a sync answer whole, a stream's
  // chunks token by token): only its start may take long. undici is loaded at the first request.
  const agents = import('undici').then(({ Agent, fetch }) => ({
    fetch,
    patient: new Agent({ headersTimeout: 0, bodyTimeout: ms }),
    prompt: new Agent({ headersTimeout: ms, bodyTimeout: ms }),
  }));
  return (async (input: string | URL, init: RequestInit = {}) => {
    const { fetch, patient, prompt } = await agents;
    const waits = init.method === 'POST' && WAITS_FOR_WORK.test(new URL(String(input)).pathname);
    return fetch(input, { ...(init as object), dispatcher: waits ? patient : prompt });
  }) as unknown as typeof fetch;
}

/**
 * The client for commands that talk to a running gateway: KILN_BASE_URL and KILN_API_KEY, with
 * `<KILN_DATA_DIR or ./data>/admin.key` as the key when KILN_API_KEY is unset (a local gateway).
 */
export function clientFromEnv(env: NodeJS.ProcessEnv = process.env): KilnClient {
  const baseUrl = env.KILN_BASE_URL || DEFAULT_BASE_URL;
  if (!/^https?:\/\/[^/]/i.test(baseUrl) || !URL.canParse(baseUrl)) {
    throw new UsageError(
      `KILN_BASE_URL must be the gateway's http(s) URL, such as ${DEFAULT_BASE_URL}; it is "${baseUrl}"`,
    );
  }
  let apiKey = env.KILN_API_KEY;
  if (!apiKey) {
    const keyFile = path.join(env.KILN_DATA_DIR || './data', 'admin.key');
    try {
      apiKey = readFileSync(keyFile, 'utf8').trim();
    } catch {
      throw new UsageError(`set KILN_API_KEY to your API key (no ${keyFile} to fall back on)`);
    }
  }
  const unreachableHint = env.KILN_BASE_URL
    ? 'The address comes from KILN_BASE_URL.'
    : `KILN_BASE_URL is unset, so this is the default; set it to the gateway's address.`;
  return new KilnClient({ baseUrl, apiKey, unreachableHint, fetch: cliFetch(env) });
}

/** What to check when the gateway answered with an error that suggests the wrong gateway or key. */
function answerHint(error: KilnApiError): string | undefined {
  // Without the context beside it, the name was deleted between the refused save and the answer.
  if (error.body.code === 'context-exists')
    return error.attached?.context
      ? 'leave out --new to replace it, or save it under another name'
      : 'the name is free again: run the same command to create it';
  if (error.body.code === 'context-changed') {
    const now = error.attached?.context as { name?: string; version?: number } | undefined;
    return now?.version === undefined
      ? 'it is gone: save with --new instead to create it again'
      : `compare yours with kiln ctx get '${now.name}' --stdout, then save with --if-version ${now.version} to replace that version`;
  }
  if (!error.url) return undefined;
  const origin = new URL(error.url).origin;
  if (error.status === 401) {
    // The admin.key file is named only where it was used: no KILN_API_KEY was set.
    const keyFile = path.join(process.env.KILN_DATA_DIR || './data', 'admin.key');
    const which = process.env.KILN_API_KEY ? 'KILN_API_KEY' : `${keyFile}, used as KILN_API_KEY is unset`;
    return `the gateway at ${origin} did not accept the key: check ${which}`;
  }
  const code = typeof error.body.code === 'string' ? error.body.code : '';
  if (code === 'route-not-found' || code.startsWith('http-')) {
    return `${error.url} is not a route of a Kiln gateway: check that KILN_BASE_URL is the gateway's address, without /v1`;
  }
  if (code === 'invalid-answer') {
    return `something other than a Kiln gateway answered at ${origin} (a proxy's login page, another service?): check that KILN_BASE_URL is the gateway's address`;
  }
  return undefined;
}

/**
 * The `onRetry` of a wait: one line on stderr when polls of job `id` start failing (the gateway
 * restarting), saying that the wait goes on. `before` clears what is on the line (a progress bar).
 */
export function sayPollRetry(id: string, before?: () => void) {
  return (error: GatewayUnreachableError | KilnApiError, _delayMs: number, attempt: number): void => {
    if (attempt !== 1) return;
    before?.();
    const why =
      error instanceof GatewayUnreachableError ? error.reason : `${error.body.code} (HTTP ${error.status})`;
    process.stderr.write(`kiln: polling ${id} failed: ${why}; trying again for up to a minute\n`);
  };
}

/**
 * Ctrl-C while a command waits on job `id` stops the wait, not the job, and says how to pick it up
 * again (`before` clears a progress line first). Answers what takes the handler off again.
 */
export function stopWaitingOnInterrupt(id: string, before?: () => void): () => void {
  const onInterrupt = () => {
    before?.();
    process.stderr.write(
      `kiln: stopped waiting; the job goes on (kiln jobs wait ${id}, or kiln jobs cancel ${id})\n`,
    );
    process.exit(130);
  };
  process.once('SIGINT', onInterrupt);
  return () => process.removeListener('SIGINT', onInterrupt);
}

/** Prints any failure the way a user wants to read it, and answers the exit code. */
export function report(error: unknown): number {
  const out = (line: string) => process.stderr.write(`${line}\n`);
  if (error instanceof JobPollError) {
    // Why the polls failed, then that the job goes on and how to pick it up again.
    report(error.cause);
    out(`kiln: ${error.message}`);
  } else if (error instanceof ConfigError || error instanceof UsageError) {
    out(`kiln: ${error.message}`);
  } else if (error instanceof GatewayUnreachableError) {
    // Never reached: say where the CLI looked and what to check, not what a gateway said.
    out(`kiln: could not connect to ${error.url}: ${error.reason}`);
    if (error.hint) out(`  ${error.hint}`);
  } else if (error instanceof KilnApiError || error instanceof KilnError) {
    const body = error.toBody();
    const status = error instanceof KilnApiError ? ` (HTTP ${error.status})` : '';
    out(`kiln: ${body.code}${status}: ${body.message}`);
    for (const d of body.details ?? []) out(`  - ${d.field}: ${d.message}`);
    const hint = error instanceof KilnApiError ? answerHint(error) : undefined;
    if (hint) out(`  ${hint}`);
  } else if (error instanceof Error && (error as NodeJS.ErrnoException).cause) {
    const cause = (error as { cause: { code?: string; message?: string } }).cause;
    out(`kiln: ${error.message}: ${cause.code ?? cause.message ?? String(cause)}`);
  } else {
    out(`kiln: ${error instanceof Error ? error.message : String(error)}`);
  }
  return 1;
}

/** Fixed-width columns for list output. */
export function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export const isoTime = (ms: number | null) =>
  ms === null ? '-' : new Date(ms).toISOString().slice(0, 19).replace('T', ' ');

/**
 * The bytes as text, refused when they are not UTF-8: replacing the bad bytes with U+FFFD would save
 * corrupted text (the HTTP API refuses such a body for the same reason). A BOM is kept, as sent.
 */
export function utf8(bytes: Uint8Array, what: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new UsageError(`${what} is not UTF-8 text; convert it first (iconv -t UTF-8)`);
  }
}

/** What to do when a command finds no store where the configuration points. */
export const NO_STORE_FIX =
  'run the command where `kiln serve` runs, or point KILN_DATA_DIR, KILN_STORE_URL or --config at its store';
