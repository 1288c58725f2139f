import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { KilnApiError, KilnClient } from '../client/index.js';
import { ConfigError, loadConfig } from '../config/load.js';
import { KilnError } from '../errors.js';

/** A mistake the user can fix; printed as one clear line without a stack. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** The server-side configuration, as `kiln serve` would read it (the global --config included). */
export function serverConfig(command: Command) {
  return loadConfig({ file: command.optsWithGlobals<{ config?: string }>().config });
}

/**
 * The client for commands that talk to a running gateway: KILN_BASE_URL and KILN_API_KEY, with
 * `<KILN_DATA_DIR or ./data>/admin.key` as the key when KILN_API_KEY is unset (a local gateway).
 */
export function clientFromEnv(env: NodeJS.ProcessEnv = process.env): KilnClient {
  const baseUrl = env.KILN_BASE_URL || 'http://127.0.0.1:8080';
  let apiKey = env.KILN_API_KEY;
  if (!apiKey) {
    const keyFile = path.join(env.KILN_DATA_DIR || './data', 'admin.key');
    try {
      apiKey = readFileSync(keyFile, 'utf8').trim();
    } catch {
      throw new UsageError(`set KILN_API_KEY to your API key (no ${keyFile} to fall back on)`);
    }
  }
  return new KilnClient({ baseUrl, apiKey });
}

/** Prints any failure the way a user wants to read it, and answers the exit code. */
export function report(error: unknown): number {
  const out = (line: string) => process.stderr.write(`${line}\n`);
  if (error instanceof ConfigError || error instanceof UsageError) {
    out(`kiln: ${error.message}`);
  } else if (error instanceof KilnApiError || error instanceof KilnError) {
    const body = error.toBody();
    const status = error instanceof KilnApiError ? ` (HTTP ${error.status})` : '';
    out(`kiln: ${body.code}${status}: ${body.message}`);
    for (const d of body.details ?? []) out(`  - ${d.field}: ${d.message}`);
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
