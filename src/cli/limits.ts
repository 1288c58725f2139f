import { type Command, Option } from 'commander';
import { LIMIT_FLAGS, LIMIT_NAMES, type LimitName } from '../limits/names.js';
import type { Limits } from '../limits/schema.js';
import { UsageError } from './common.js';

export type LimitChange = Partial<Record<LimitName, number | null>>;

const camel = (flag: string) => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

/** Adds `--rpm`, `--tpm`, `--concurrent`, `--tokens-per-day`, … to a command. */
export function limitOptions(command: Command, removable: boolean): Command {
  for (const name of LIMIT_NAMES) {
    const hint = removable ? ` (none removes it)` : '';
    command.addOption(new Option(`--${LIMIT_FLAGS[name]} <n>`, `${name.replaceAll('_', ' ')}${hint}`));
  }
  return command;
}

/** The limits the options set: whole numbers, or `none` (where removable) to remove one. */
export function limitChange(options: Record<string, unknown>, removable: boolean): LimitChange {
  const change: LimitChange = {};
  for (const name of LIMIT_NAMES) {
    const flag = LIMIT_FLAGS[name];
    const value = options[camel(flag)];
    if (value === undefined) continue;
    if (removable && value === 'none') {
      change[name] = null;
      continue;
    }
    if (typeof value !== 'string' || !/^[0-9]{1,12}$/.test(value)) {
      throw new UsageError(
        `--${flag} takes a whole number of 0 or more${removable ? ', or none to remove the limit' : ''} (got '${String(value)}')`,
      );
    }
    change[name] = Number(value);
  }
  return change;
}

/** Limits as `kiln keys list` and `kiln orgs list` show them: `rpm=10 tpm=5000`, or `-`. */
export function limitsSummary(limits: Limits): string {
  const parts = LIMIT_NAMES.filter((n) => limits[n] !== undefined).map(
    (n) => `${LIMIT_FLAGS[n]}=${limits[n]}`,
  );
  return parts.length > 0 ? parts.join(' ') : '-';
}
