import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/main.js';

/**
 * docs/cli.md is the reference of every `kiln` command and flag. Each command has a heading whose
 * first code span is its full name (`kiln ctx save`); the tables of its section, up to the next
 * heading, name every long flag the command takes, and no flag it does not take. A flag added,
 * renamed or removed without the reference fails here.
 */

const REFERENCE = new URL('../../docs/cli.md', import.meta.url);

interface Entry {
  name: string;
  flags: string[];
}

/** Every command of the real program, the root included, with its long flags (--help aside). */
function commandTree(command: Command, path: string[] = []): Entry[] {
  const name = ['kiln', ...path].join(' ');
  const flags = command.options.map((o) => o.long).filter((f): f is string => !!f && f !== '--help');
  return [{ name, flags }, ...command.commands.flatMap((sub) => commandTree(sub, [...path, sub.name()]))];
}

/** The sections of a Markdown text by the first code span of their heading; code blocks skipped. */
function sections(markdown: string): Map<string, string[]> {
  const found = new Map<string, string[]>();
  let current: string[] | undefined;
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6} (.*)$/.exec(line);
    if (heading) {
      const name = /`([^`]+)`/.exec(heading[1] ?? '')?.[1];
      current = name?.startsWith('kiln') ? [] : undefined;
      if (name && current) found.set(name, current);
      continue;
    }
    current?.push(line);
  }
  return found;
}

/** The long flags a piece of text names, as `--name`, whole. */
const flagsIn = (text: string): string[] =>
  [...text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)].map((m) => m[0]);

const tree = commandTree(buildProgram());
const reference = sections(readFileSync(REFERENCE, 'utf8'));

describe('docs/cli.md', () => {
  it('finds the command tree', () => {
    expect(tree.length).toBeGreaterThan(30);
    expect(tree.map((c) => c.name)).toContain('kiln ctx save');
  });

  it.each(tree.map((c) => [c.name, c] as const))(
    'has a section for %s naming each of its flags',
    (_, entry) => {
      const section = reference.get(entry.name);
      expect(section, `no heading for \`${entry.name}\` in docs/cli.md`).toBeDefined();
      const rows = (section ?? []).filter((line) => line.startsWith('|'));
      const named = new Set(flagsIn(rows.join('\n')));
      const missing = entry.flags.filter((flag) => !named.has(flag));
      expect(missing, `flags of ${entry.name} missing from the tables of its section of docs/cli.md`).toEqual(
        [],
      );
    },
  );

  it('lists in each section’s tables only flags the command takes', () => {
    const byName = new Map(tree.map((c) => [c.name, new Set([...c.flags, '--help'])]));
    for (const [name, lines] of reference) {
      const real = byName.get(name);
      expect(real, `docs/cli.md has a section for \`${name}\`, which is no command`).toBeDefined();
      const tables = lines.filter((line) => line.startsWith('|')).join('\n');
      const unknown = flagsIn(tables).filter((flag) => !real?.has(flag));
      expect(unknown, `flags in the tables of ${name} that it does not take`).toEqual([]);
    }
  });
});
