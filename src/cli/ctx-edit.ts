import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { type ContextWithContent, KilnApiError } from '../client/index.js';
import { clientFromEnv, UsageError, utf8 } from './common.js';

const CONTEXT_ID = /^ctx_[0-9a-f]{32}$/;

/** The context, or undefined when no context has this name (an id that names none is an error). */
async function current(ref: string): Promise<ContextWithContent | undefined> {
  try {
    return await clientFromEnv().contexts.get(ref);
  } catch (error) {
    if (error instanceof KilnApiError && error.status === 404 && !CONTEXT_ID.test(ref)) return undefined;
    throw error;
  }
}

/** Runs the user's editor on `file` and waits for it; false when it failed. */
function runEditor(file: string): { ok: boolean; why?: string } {
  const editor = process.env.VISUAL || process.env.EDITOR || 'vi';
  // Through the shell, as git does: an editor is often a command with arguments (`code --wait`).
  const run = spawnSync('/bin/sh', ['-c', `${editor} "$1"`, 'kiln-edit', file], { stdio: 'inherit' });
  if (run.error) return { ok: false, why: run.error.message };
  if (run.status !== 0)
    return { ok: false, why: `'${editor}' exited with status ${run.status ?? run.signal}` };
  return { ok: true };
}

/**
 * `kiln ctx edit <name>`: the context's content in the user's editor, saved back with If-Match on
 * the version that was opened, so that a teammate's save in the meantime is never overwritten: the
 * save is refused, and the edit is kept in its file for the user to compare and save deliberately.
 * A name that does not exist yet is created (If-None-Match: *); an unchanged or emptied file saves
 * nothing.
 */
export function ctxEditCommand(ctx: Command): void {
  ctx
    .command('edit <id-or-name>')
    .description(
      'edit a context in $VISUAL or $EDITOR; refused, and your edit kept, if it changed since you opened it',
    )
    .action(async (ref: string) => {
      const before = await current(ref);
      const name = before?.name ?? ref;
      const dir = mkdtempSync(path.join(tmpdir(), 'kiln-edit-'));
      // Named after the context, so an editor highlights `schema.json` as JSON.
      const file = path.join(dir, path.basename(name).replace(/^\.+/, '') || 'context');
      writeFileSync(file, before?.content ?? '', { mode: 0o600 });
      const kept = () => process.stderr.write(`  your edit is kept in ${file}\n`);

      const edited = runEditor(file);
      if (!edited.ok) {
        rmSync(dir, { recursive: true, force: true });
        throw new UsageError(`the editor failed (${edited.why}): nothing was saved`);
      }
      const content = utf8(readFileSync(file), file);
      if (content === (before?.content ?? '')) {
        rmSync(dir, { recursive: true, force: true });
        process.stdout.write(
          before
            ? `no change: '${name}' stays at version ${before.version}\n`
            : `nothing written: no context '${name}' was created\n`,
        );
        return;
      }
      if (content === '') {
        rmSync(dir, { recursive: true, force: true });
        throw new UsageError(
          `the file is empty: nothing was saved (kiln ctx rm '${name}' deletes a context)`,
        );
      }
      try {
        const { context, created } = await clientFromEnv().contexts.save(
          {
            name,
            content,
            ...(before?.description ? { description: before.description } : {}),
          },
          before ? { ifMatch: `"${before.id}.${before.version}"` } : { ifNoneMatch: '*' },
        );
        rmSync(dir, { recursive: true, force: true });
        process.stdout.write(
          `${created ? 'saved' : 'replaced'} ${context.id} '${context.name}' (${context.size_bytes} bytes, version ${context.version})\n`,
        );
      } catch (error) {
        // Whatever refused the save, the edit is not lost.
        if (error instanceof KilnApiError && error.status === 412) {
          process.stderr.write(`kiln: ${error.body.code} (HTTP 412): ${error.body.message}\n`);
          kept();
          process.stderr.write(
            `  compare: kiln ctx get '${name}' --stdout; to save yours over it: kiln ctx save --name '${name}' --file '${file}'\n`,
          );
          process.exitCode = 1;
          return;
        }
        kept();
        throw error;
      }
    });
}
