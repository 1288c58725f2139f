import { readFile } from 'node:fs/promises';
import { type Command, InvalidArgumentError } from 'commander';
import { KilnApiError, type KilnClient } from '../client/index.js';
import { etagOf } from '../contexts/service.js';
import { clientFromEnv, isoTime, table, UsageError, utf8 } from './common.js';
import { ctxEditCommand } from './ctx-edit.js';

/** `--limit`: a page of 1 to 100, checked before anything is sent. */
function pageSize(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || value < 1 || value > 100) {
    throw new InvalidArgumentError('expected a whole number from 1 to 100');
  }
  return value;
}

interface SaveOptions {
  name: string;
  content?: string;
  fromClipboard?: boolean;
  file?: string;
  description?: string;
  new?: boolean;
  ifVersion?: string;
}

/** `--if-version`'s value: a version number as the CLI prints them. */
function versionOf(text: string): number {
  const version = Number(text);
  if (!/^[1-9][0-9]*$/.test(text) || !Number.isSafeInteger(version)) {
    throw new UsageError(`--if-version takes a version number such as 3, not '${text}'`);
  }
  return version;
}

/**
 * What a save is conditional on: nothing (a plain replace), no context of the name (`--new`), or the
 * context named being at one version (`--if-version`), whose ETag needs the context's id. Checked
 * before the content is read; the id is looked up only once the content is in hand.
 */
function preconditionOf(
  options: SaveOptions,
): (client: KilnClient) => Promise<{ ifNoneMatch?: string; ifMatch?: string }> {
  if (options.new && options.ifVersion !== undefined) {
    throw new UsageError('give --new (create only) or --if-version (replace only that version), not both');
  }
  if (options.new) return async () => ({ ifNoneMatch: '*' });
  if (options.ifVersion === undefined) return async () => ({});
  const version = versionOf(options.ifVersion);
  return async (client) => {
    try {
      const { id } = await client.contexts.get(options.name);
      return { ifMatch: etagOf({ id, version }) };
    } catch (error) {
      if (!(error instanceof KilnApiError && error.body.code === 'not-found')) throw error;
      throw new UsageError(
        `no context named '${options.name}' to replace at version ${version}: nothing was saved (kiln ctx save --new creates it)`,
      );
    }
  };
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return utf8(Buffer.concat(chunks), 'the piped input');
}

/**
 * Exactly one source of content: -c, --from-clipboard, --file, or else piped stdin. With a flag,
 * stdin is not read: a `while read` loop's input stays the loop's.
 */
async function contentOf(options: SaveOptions): Promise<string> {
  const given = [
    options.content !== undefined,
    options.fromClipboard === true,
    options.file !== undefined,
  ].filter(Boolean);
  if (given.length > 1) throw new UsageError('give the content one way only: -c, --from-clipboard or --file');
  if (options.content !== undefined) return options.content;
  if (options.fromClipboard) {
    const { readClipboard } = await import('./clipboard.js');
    const pasted = await readClipboard();
    // An empty clipboard is almost always a mistake, and saving it would wipe the context.
    if (pasted === '')
      throw new UsageError('the clipboard is empty: copy the content first, or pass it with -c or --file');
    return pasted;
  }
  if (options.file !== undefined) {
    try {
      return utf8(await readFile(options.file), options.file);
    } catch (error) {
      if (error instanceof UsageError) throw error;
      throw new UsageError(
        `cannot read ${options.file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      );
    }
  }
  if (process.stdin.isTTY) {
    throw new UsageError(
      'no content: pass -c <content>, --from-clipboard, --file <path>, or pipe it on stdin',
    );
  }
  const piped = await readStdin();
  // Empty stdin (cron, CI, </dev/null) is a missing input, not an empty context to save over the old one.
  if (piped === '')
    throw new UsageError(
      'no content on stdin: pass -c <content>, --from-clipboard, --file <path>, or pipe it in',
    );
  return piped;
}

export function ctxCommands(program: Command): void {
  const ctx = program
    .command('ctx')
    .description("the organisation's shared context store (uses KILN_BASE_URL and KILN_API_KEY)");

  ctx
    .command('save')
    .description('save a named context; the same name replaces the content and bumps the version')
    .requiredOption('--name <name>', 'context name (1–128 of A-Z a-z 0-9 . _ / -)')
    .option('-c, --content <content>', 'the content itself')
    .option('--from-clipboard', 'take the content from the clipboard')
    .option('--file <path>', 'take the content from a file')
    .option('--description <text>', 'a one-line description')
    .option('--new', 'create only: refuse, and keep the stored one, when the name exists')
    .option(
      '--if-version <n>',
      'replace only version n: refuse, and keep the stored one, if it changed since',
    )
    .action(async (options: SaveOptions) => {
      const precondition = preconditionOf(options);
      const content = await contentOf(options);
      // Empty content is a mistake far more often than a wish (an unset "$VAR", an empty file), and
      // it would wipe the stored context: refused, as empty stdin and an empty clipboard are.
      if (content === '') {
        throw new UsageError(
          `the content is empty: nothing was saved (kiln ctx rm '${options.name}' deletes a context)`,
        );
      }
      const client = clientFromEnv();
      const { context, created } = await client.contexts.save(
        {
          name: options.name,
          content,
          ...(options.description === undefined ? {} : { description: options.description }),
        },
        await precondition(client),
      );
      process.stdout.write(
        `${created ? 'saved' : 'replaced'} ${context.id} '${context.name}' (${context.size_bytes} bytes, version ${context.version}), shared with your organisation\n`,
      );
    });

  ctxEditCommand(ctx);

  ctx
    .command('get [id-or-name]')
    .description('copy a context to the clipboard (or print it with --stdout)')
    .option('-c, --context <id-or-name>', 'the context id (ctx_…) or name')
    .option('--stdout', 'print the content instead of copying it')
    .action(async (positional: string | undefined, options: { context?: string; stdout?: boolean }) => {
      const ref = options.context ?? positional;
      if (!ref) throw new UsageError('name the context: kiln ctx get -c <id-or-name>');
      const context = await clientFromEnv().contexts.get(ref);
      if (options.stdout) {
        process.stdout.write(context.content);
        return;
      }
      const { copyToClipboard } = await import('./clipboard.js');
      await copyToClipboard(context.content);
      process.stdout.write(
        `copied ${context.id} '${context.name}' (${context.size_bytes} bytes, version ${context.version}) to the clipboard\n`,
      );
    });

  ctx
    .command('list')
    .description("list the organisation's contexts")
    .option('--prefix <prefix>', 'only names starting with this')
    .option('--limit <n>', 'page size (1–100)', pageSize, 100)
    .option('--after <name>', 'start after this name (the last one of the previous page)')
    .option('--json', 'print the API answer as JSON')
    .action(async (options: { prefix?: string; limit: number; after?: string; json?: boolean }) => {
      const page = await clientFromEnv().contexts.list({
        limit: options.limit,
        ...(options.prefix ? { prefix: options.prefix } : {}),
        ...(options.after ? { after: options.after } : {}),
      });
      if (options.json) {
        process.stdout.write(`${JSON.stringify(page, null, 2)}\n`);
        return;
      }
      const rows = page.data.map((c) => [
        c.id,
        c.name,
        String(c.size_bytes),
        String(c.version),
        isoTime(c.updated_at * 1000),
      ]);
      process.stdout.write(`${table([['ID', 'NAME', 'BYTES', 'VERSION', 'UPDATED'], ...rows])}\n`);
      const last = page.data[page.data.length - 1];
      if (page.has_more && last) {
        const same = `${options.prefix ? ` --prefix '${options.prefix}'` : ''} --limit ${options.limit}`;
        process.stderr.write(`more: kiln ctx list${same} --after '${last.name}'\n`);
      }
    });

  ctx
    .command('rm <id-or-name>')
    .description('delete a context')
    .action(async (ref: string) => {
      const deleted = await clientFromEnv().contexts.delete(ref);
      process.stdout.write(`deleted ${deleted.id}\n`);
    });
}
