import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { type ContextWithContent, KilnApiError } from '../client/index.js';
import { etagOf } from '../contexts/service.js';
import { clientFromEnv, report, UsageError, utf8 } from './common.js';

/**
 * The context, or undefined when no context has this name. A reference that starts with `ctx_` is
 * an id, which must exist; any other failure (a 404 from a wrong KILN_BASE_URL too) is the caller's.
 */
async function current(ref: string): Promise<ContextWithContent | undefined> {
  try {
    return await clientFromEnv().contexts.get(ref);
  } catch (error) {
    const absent = error instanceof KilnApiError && error.body.code === 'not-found';
    if (absent && !ref.startsWith('ctx_')) return undefined;
    throw error;
  }
}

/** The command that opens a file: $VISUAL, then $EDITOR, then vi, which needs a terminal. */
function editorCommand(): string {
  const chosen = process.env.VISUAL || process.env.EDITOR;
  if (chosen) return chosen;
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    throw new UsageError(
      'no terminal to run vi in: set VISUAL or EDITOR, or save the content with kiln ctx save --file',
    );
  }
  return 'vi';
}

/** Runs the user's editor on `file` and waits for it; why it failed, if it did. */
function runEditor(editor: string, file: string): string | undefined {
  // Ctrl-C is the editor's (a GUI editor's `--wait` goes on without us): ignored here meanwhile, as git does.
  const ignore = () => undefined;
  process.on('SIGINT', ignore);
  process.on('SIGQUIT', ignore);
  try {
    // Through the shell, as git does: an editor is often a command with arguments (`code --wait`).
    const run = spawnSync('/bin/sh', ['-c', `${editor} "$1"`, 'kiln-edit', file], { stdio: 'inherit' });
    if (run.error) return run.error.message;
    if (run.status !== 0) return `'${editor}' exited with ${run.status ?? run.signal}`;
    return undefined;
  } finally {
    process.off('SIGINT', ignore);
    process.off('SIGQUIT', ignore);
  }
}

/** `ref` if the gateway would take it as a context's name; the validator loads only here. */
async function validName(ref: string): Promise<string> {
  const [{ assertValid }, { ContextName }] = await Promise.all([
    import('../api/validation.js'),
    import('../contexts/schemas.js'),
  ]);
  return assertValid<string>(ContextName, ref, 'name');
}

/**
 * `kiln ctx edit <name>`: the context's content in the user's editor, saved back with If-Match on
 * the version that was opened, so that a teammate's save in the meantime is never overwritten: the
 * save is refused, and the edit is kept in its file for the user to compare and save deliberately.
 * A name that does not exist yet is created (If-None-Match: *); an unchanged or emptied file saves
 * nothing. Whatever goes wrong once the user has edited, the edit is kept and its file named.
 */
export function ctxEditCommand(ctx: Command): void {
  ctx
    .command('edit <id-or-name>')
    .description(
      'edit a context in $VISUAL or $EDITOR; refused, and your edit kept, if it changed since you opened it',
    )
    .action(async (ref: string) => {
      const before = await current(ref);
      // A name the save would refuse is refused before anything is typed.
      const name = before?.name ?? (await validName(ref));
      const editor = editorCommand();
      const dir = mkdtempSync(path.join(tmpdir(), 'kiln-edit-'));
      // Named after the context, so an editor highlights `schema.json` as JSON.
      const file = path.join(dir, path.basename(name).replace(/^\.+/, '') || 'context');
      const opened = before?.content ?? '';
      writeFileSync(file, opened, { mode: 0o600 });
      const discard = () => rmSync(dir, { recursive: true, force: true });
      const keep = (why: string): never => {
        throw new UsageError(`${why}\n  your edit is kept in ${file}`);
      };

      const failed = runEditor(editor, file);
      let bytes: Buffer;
      try {
        bytes = readFileSync(file);
      } catch {
        // The editor moved or deleted the file (saved elsewhere, say): there is no edit to save.
        discard();
        throw new UsageError(`${file} is gone after the editor: nothing was saved`);
      }
      const changed = !bytes.equals(Buffer.from(opened, 'utf8'));
      if (failed) {
        const why = `the editor failed (${failed}): nothing was saved`;
        if (changed) keep(why);
        discard();
        throw new UsageError(why);
      }
      if (!changed) {
        discard();
        process.stdout.write(
          before
            ? `no change: '${name}' stays at version ${before.version}\n`
            : `nothing written: no context '${name}' was created\n`,
        );
        return;
      }
      let content: string;
      try {
        content = utf8(bytes, 'the edited file');
      } catch (error) {
        return keep((error as Error).message);
      }
      if (content === '') {
        discard();
        throw new UsageError(
          `the file is empty: nothing was saved (kiln ctx rm '${name}' deletes a context)`,
        );
      }
      try {
        // The description stays as it is: a save without one keeps the stored one.
        const { context, created } = await clientFromEnv().contexts.save(
          { name, content },
          before ? { ifMatch: etagOf(before) } : { ifNoneMatch: '*' },
        );
        discard();
        process.stdout.write(
          `${created ? 'saved' : 'replaced'} ${context.id} '${context.name}' (${context.size_bytes} bytes, version ${context.version})\n`,
        );
      } catch (error) {
        if (!(error instanceof KilnApiError && error.status === 412)) {
          process.exitCode = report(error);
          process.stderr.write(`  your edit is kept in ${file}\n`);
          return;
        }
        const theirs = error.attached?.context as { version?: number } | undefined;
        const lines = [
          `kiln: ${error.body.code} (HTTP 412): ${error.body.message}`,
          `  your edit is kept in ${file}`,
          ...(theirs
            ? [
                `  compare it with version ${theirs.version}: kiln ctx get '${name}' --stdout | diff - '${file}'`,
                `  to edit version ${theirs.version} instead, run kiln ctx edit '${name}' again and bring your change over,`,
                `  or replace version ${theirs.version} with yours: kiln ctx save --name '${name}' --file '${file}' --if-version ${theirs.version}`,
              ]
            : [
                `  '${name}' no longer exists: kiln ctx save --new --name '${name}' --file '${file}' creates it again`,
              ]),
        ];
        process.stderr.write(`${lines.join('\n')}\n`);
        process.exitCode = 1;
      }
    });
}
