import type { Command } from 'commander';
import {
  type ChatCompletion,
  type ChatRequest,
  contentOf,
  deltaOf,
  type Job,
  type KilnClient,
} from '../client/index.js';
import { clientFromEnv, sayPollRetry, stopWaitingOnInterrupt, table, UsageError } from './common.js';
import { pipedInput } from './stdin.js';

interface ChatOptions {
  persona?: string;
  model?: string;
  system?: string;
  context?: string[];
  async?: boolean;
  wait?: boolean;
  stream?: boolean;
  maxTokens?: string;
  seed?: string;
  json?: boolean;
  list?: boolean;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * The message: the arguments joined by spaces, else piped stdin (less one trailing newline). Both
 * (`git diff | kiln chat … "review this"`) make one message: the piped text, a blank line, then the
 * arguments, the way other LLM command lines join them.
 */
async function messageOf(words: string[]): Promise<string> {
  if (words.length > 0) {
    const message = words.join(' ');
    if (message.trim() === '') throw new UsageError('the message is empty: say something');
    const piped = (await pipedInput())?.toString('utf8').replace(/\r?\n$/, '');
    return piped === undefined || piped.trim() === '' ? message : `${piped}\n\n${message}`;
  }
  if (process.stdin.isTTY) {
    throw new UsageError(
      'no message: pass it as arguments (kiln chat --persona <name> "hello") or pipe it in',
    );
  }
  const piped = (await readStdin()).replace(/\r?\n$/, '');
  if (piped.trim() === '') {
    throw new UsageError('no message on stdin: pass it as arguments, or pipe in some text');
  }
  return piped;
}

function integer(flag: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(
      `${flag} must be a whole number${min > Number.MIN_SAFE_INTEGER ? ` of ${min} or more` : ''}, not '${value}'`,
    );
  }
  return n;
}

const print = (text: string): void => {
  process.stdout.write(text);
};
const printJson = (value: unknown) => print(`${JSON.stringify(value, null, 2)}\n`);
/** The text, ending with exactly the one newline it needs. */
const printText = (text: string) => print(text.endsWith('\n') ? text : `${text}\n`);

async function listModels(client: KilnClient, json: boolean): Promise<void> {
  const models = await client.models.list();
  if (json) return printJson(models);
  const rows = models.data.map((m) => [m.id, m.kind, m.ready ? 'yes' : 'no', m.owned_by]);
  print(`${table([['ID', 'KIND', 'READY', 'OWNED_BY'], ...rows])}\n`);
}

/** Reports a job that ended without completing, and sets a failing exit code. */
function reportJobFailure(job: Job): void {
  const code = job.code ?? job.status;
  process.stderr.write(
    `kiln: job ${job.id} ${job.status}: ${code}: ${job.message ?? `the job ended ${job.status}`}\n`,
  );
  process.exitCode = 1;
}

/** A reader that stopped reading (`kiln chat … | head -1`) ends the command quietly; the stream's job is cancelled. */
function quietOnClosedStdout(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(process.exitCode ?? 0);
  });
}

async function streamed(client: KilnClient, body: ChatRequest, json: boolean): Promise<void> {
  let last = '';
  let ended = false;
  try {
    for await (const chunk of client.chat.stream(body)) {
      if (json) {
        print(`${JSON.stringify(chunk)}\n`);
        continue;
      }
      const content = deltaOf(chunk);
      if (content !== '') {
        print(content);
        last = content;
      }
    }
    ended = true;
  } finally {
    // The closing newline, also when the stream fails midway so that the error gets a line of its own.
    if (!json && (ended || last !== '') && !last.endsWith('\n')) print('\n');
  }
}

export function chatCommands(program: Command): void {
  program
    .command('chat [message...]')
    .description(
      'chat with a persona or a model (uses KILN_BASE_URL and KILN_API_KEY); the message may be piped in, and piped text goes before the arguments',
    )
    .option('--persona <name>', 'the persona to talk to (kiln chat --list shows them)')
    .option('--model <name>', 'a model the fleet serves, instead of a persona')
    .option('--system <text>', 'a system message before yours')
    .option(
      '--context <name>',
      "prepend a context from the organisation's store (repeatable)",
      (v, acc: string[] = []) => [...acc, v],
    )
    .option('--max-tokens <n>', 'the most tokens to generate')
    .option('--seed <n>', 'a sampling seed, for repeatable answers')
    .option('--stream', 'print tokens as they arrive (the default when stdout is a terminal)')
    .option('--no-stream', 'print the answer once it is complete')
    .option('--async', 'submit a job and print its id instead of waiting')
    .option('--wait', 'with --async: poll the job and print the answer once it is done')
    .option('--json', 'print the JSON answer (with --stream: one chunk per line)')
    .option('--list', 'list the personas and models instead of chatting')
    .action(async (words: string[], options: ChatOptions) => {
      if (options.list) {
        if (words.length > 0) throw new UsageError('--list takes no message');
        return listModels(clientFromEnv(), options.json === true);
      }
      if (options.persona !== undefined && options.model !== undefined) {
        throw new UsageError('pass --persona or --model, not both');
      }
      const model = options.persona ?? options.model;
      if (!model) {
        throw new UsageError(
          'say who to talk to: --persona <name> or --model <name> (kiln chat --list shows them)',
        );
      }
      if (options.wait && !options.async) {
        throw new UsageError(
          '--wait goes with --async (without --async, kiln chat waits for the answer anyway)',
        );
      }
      if (options.async && options.stream === true) {
        throw new UsageError('--async and --stream do not go together: an async job is polled, not streamed');
      }
      const maxTokens = integer('--max-tokens', options.maxTokens, 1);
      const seed = integer('--seed', options.seed, Number.MIN_SAFE_INTEGER);
      const message = await messageOf(words);
      const client = clientFromEnv();
      const body: ChatRequest = {
        model,
        messages: [
          ...(options.system === undefined ? [] : [{ role: 'system' as const, content: options.system }]),
          { role: 'user', content: message },
        ],
        ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
        ...(seed === undefined ? {} : { seed }),
        ...(options.context?.length ? { contexts: options.context } : {}),
      };
      const json = options.json === true;
      quietOnClosedStdout();

      if (options.async) {
        const submitted = await client.chat.submit(body);
        if (!options.wait) {
          if (json) return printJson(submitted);
          // The job id alone on stdout, for `id=$(kiln chat --async …)`; the words on stderr.
          process.stderr.write(
            `submitted ${submitted.id} (${submitted.status}); poll ${submitted.polling_url}\n` +
              `wait for it: kiln jobs wait ${submitted.id}\n`,
          );
          print(`${submitted.id}\n`);
          return;
        }
        // The id first, on stderr: should the wait be interrupted, the job goes on and can be found.
        process.stderr.write(`submitted ${submitted.id}; waiting for it\n`);
        const stopWatching = stopWaitingOnInterrupt(submitted.id);
        const job = await client.jobs
          .wait(submitted.id, { intervalMs: 250, onRetry: sayPollRetry(submitted.id) })
          .finally(stopWatching);
        if (json) printJson(job);
        if (job.status !== 'completed') return reportJobFailure(job);
        if (!json) printText(contentOf(job.result as ChatCompletion));
        return;
      }

      // A terminal gets tokens as they come; a pipe or a file (and --json) the finished answer.
      const stream = options.stream ?? (process.stdout.isTTY === true && !json);
      if (stream) return streamed(client, body, json);
      const completion = await client.chat.create(body);
      if (json) return printJson(completion);
      printText(contentOf(completion));
    });
}
