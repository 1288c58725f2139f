import type { Command } from 'commander';
import type { Job, ListJobsQuery } from '../client/index.js';
import { clientFromEnv, isoTime, sayPollRetry, stopWaitingOnInterrupt, table, UsageError } from './common.js';
import { Progress } from './progress.js';

const printJson = (value: unknown): void => {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
};

function positive(
  flag: string,
  value: string | undefined,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value.trim()) || !(n > 0) || n > max) {
    throw new UsageError(
      `${flag} must be a number above 0${max < Number.MAX_SAFE_INTEGER ? ` and at most ${max}` : ''}, not '${value}'`,
    );
  }
  return n;
}

const seconds = (s: number | null) => isoTime(s === null ? null : s * 1000);

export function jobsCommands(program: Command): void {
  const jobs = program
    .command('jobs')
    .description('poll, wait for, cancel and list jobs of every kind (uses KILN_BASE_URL and KILN_API_KEY)');

  jobs
    .command('get <id>')
    .description('print a job as JSON (id: chatcmpl-…, a bare UUID, or its polling_url)')
    .action(async (id: string) => printJson(await clientFromEnv().jobs.get(id)));

  jobs
    .command('wait <id>')
    .description(
      'poll a job until it is done (with a progress bar on stderr) and print it as JSON; exits 1 unless it completed',
    )
    .option('--interval <ms>', 'time between polls', '500')
    .option('--timeout <seconds>', 'give up after this long (the job goes on)')
    .action(async (id: string, options: { interval: string; timeout?: string }) => {
      // As the media commands take it: a whole number of ms a timer can hold, and no busier than 10.
      const intervalMs = positive('--interval', options.interval, 60_000) as number;
      if (!Number.isInteger(intervalMs) || intervalMs < 10)
        throw new UsageError(
          `--interval must be a whole number of ms from 10 to 60000, not '${options.interval}'`,
        );
      const timeout = positive('--timeout', options.timeout);
      // A bar on stderr once the job reports progress (image and video jobs do; chat jobs do not).
      const progress = new Progress(id);
      // Ctrl-C stops the wait, not the job, as every wait of the CLI does, and says so.
      const stopWatching = stopWaitingOnInterrupt(id, () => progress.clear());
      const job = await clientFromEnv()
        .jobs.wait(id, {
          intervalMs,
          ...(timeout === undefined ? {} : { timeoutMs: timeout * 1000 }),
          onProgress: (polled) => progress.update(polled),
          onRetry: sayPollRetry(id, () => progress.end()),
        })
        .catch((error: unknown) => {
          progress.end();
          throw error;
        })
        .finally(stopWatching);
      progress.finish(job);
      printJson(job);
      if (job.status !== 'completed') process.exitCode = 1;
    });

  jobs
    .command('cancel <id>')
    .description('cancel a queued or running job and print it as JSON')
    .action(async (id: string) => printJson(await clientFromEnv().jobs.cancel(id)));

  jobs
    .command('list')
    .description("list the organisation's jobs, newest first")
    .option(
      '--status <status>',
      'only jobs in this status (queued, running, completed, failed, cancelled, timeout)',
    )
    .option('--kind <kind>', 'only jobs of this kind (chat, …)')
    .option('--limit <n>', 'page size (1–100)', '20')
    .option('--after <id>', 'start after this job (the last id of the previous page)')
    .option('--json', 'print the API answer as JSON')
    .action(
      async (options: { status?: string; kind?: string; limit: string; after?: string; json?: boolean }) => {
        const limit = positive('--limit', options.limit, 100) as number;
        if (!Number.isInteger(limit))
          throw new UsageError(`--limit must be a whole number, not '${options.limit}'`);
        const query: ListJobsQuery = {
          limit,
          ...(options.status ? { status: options.status as NonNullable<ListJobsQuery['status']> } : {}),
          ...(options.kind ? { kind: options.kind } : {}),
          ...(options.after ? { after: options.after } : {}),
        };
        const page = await clientFromEnv().jobs.list(query);
        if (options.json) return printJson(page);
        const rows = page.data.map((job: Job) => [
          job.id,
          job.kind,
          job.status,
          seconds(job.created),
          seconds(job.finished_at),
          job.code ?? '',
        ]);
        process.stdout.write(
          `${table([['ID', 'KIND', 'STATUS', 'CREATED', 'FINISHED', 'CODE'], ...rows])}\n`,
        );
        if (page.has_more && page.last_id) {
          // The same filters and page size, from where this page ended.
          const same = [
            options.status ? ` --status ${options.status}` : '',
            options.kind ? ` --kind '${options.kind}'` : '',
            ` --limit ${limit}`,
          ].join('');
          process.stderr.write(`more: kiln jobs list${same} --after ${page.last_id}\n`);
        }
      },
    );
}
