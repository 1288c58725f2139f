import { existsSync } from 'node:fs';
import path from 'node:path';
import { type Command, Option } from 'commander';
import { issueKey } from '../auth/keys.js';
import { randomBase62 } from '../ids.js';
import type { Limits } from '../limits/schema.js';
import type { Store } from '../store/index.js';
import { latestVersion, newerStoreProblem } from '../store/migrations.js';
import { VERSION } from '../version.js';
import { isoTime, NO_STORE_FIX, serverConfig, table, UsageError } from './common.js';
import { limitChange, limitOptions, limitsSummary } from './limits.js';

/**
 * Admin commands work on the store directly, with the same configuration as `kiln serve`. They
 * never create one: run from the wrong directory, an admin command would otherwise make a new,
 * empty store and list no keys. `kiln migrate` (or `kiln serve`) creates it. Nor do they migrate
 * one: a newer CLI run against a store that older gateways still serve would otherwise apply the
 * new release's migrations under them, outside the maintenance window the upgrade planned.
 */
async function withStore<T>(command: Command, work: (store: Store) => Promise<T>): Promise<T> {
  const config = await serverConfig(command);
  const url = config.store.url;
  const fix = `${NO_STORE_FIX}; \`kiln migrate\` creates a new one`;
  if (url.startsWith('sqlite:') && url !== 'sqlite::memory:' && !existsSync(url.slice('sqlite:'.length))) {
    throw new UsageError(`there is no Kiln store at ${path.resolve(url.slice('sqlite:'.length))}: ${fix}`);
  }
  // Loaded on use: the database drivers are the slowest part of starting the CLI.
  const { openStore } = await import('../store/index.js');
  const store = openStore(config.store);
  try {
    if (url.startsWith('sqlite:') && !(await store.exists())) {
      throw new UsageError(`${path.resolve(url.slice('sqlite:'.length))} holds no Kiln store: ${fix}`);
    }
    if (!url.startsWith('sqlite:') && !(await store.exists())) {
      const { shownStoreUrl, storeOpenError } = await import('../store/postgres/open-error.js');
      // Not reachable at all is another story, told as `kiln serve` tells it.
      await store.ping().catch((error: unknown) => {
        throw storeOpenError(url, error);
      });
      throw new UsageError(
        `schema ${config.store.schema} of ${shownStoreUrl(url)} holds no Kiln store: ${fix}`,
      );
    }
    const version = await store.schemaVersion();
    const newer = newerStoreProblem(version);
    if (newer) {
      throw new UsageError(
        `${newer}: use a kiln at least as new as the one that migrated it; nothing was changed`,
      );
    }
    if (version < latestVersion()) {
      throw new UsageError(
        `the store is at schema version ${version} and this Kiln (${VERSION}) works on version ${latestVersion()}: ` +
          'apply the pending migrations with `kiln migrate` first (docs/operations.md, "Upgrades and migrations"); nothing was changed',
      );
    }
    return await work(store);
  } finally {
    await store.close();
  }
}

export function adminCommands(program: Command): void {
  const orgs = program.command('orgs').description('manage organisations');
  orgs
    .command('create <name>')
    .description('create an organisation')
    .action(async (name: string, _options, command: Command) => {
      const { ORG_NAME } = await import('../admin/schemas.js');
      if (!ORG_NAME.test(name)) {
        throw new UsageError(
          'organisation names are 1–64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit',
        );
      }
      await withStore(command, async (store) => {
        const org = await store.orgs.create(name);
        if (!org) throw new UsageError(`organisation '${name}' already exists`);
        process.stdout.write(`${org.id}  ${org.name}\n`);
      });
    });
  orgs
    .command('list')
    .description('list organisations')
    .action(async (_options, command: Command) => {
      await withStore(command, async (store) => {
        const rows = [];
        for (const o of await store.orgs.list())
          rows.push([o.id, o.name, isoTime(o.created_at), limitsSummary(await store.orgs.limits(o.id))]);
        process.stdout.write(`${table([['ID', 'NAME', 'CREATED', 'LIMITS'], ...rows])}\n`);
      });
    });
  limitOptions(
    orgs
      .command('update <name>')
      .description("set or remove the organisation's limits, shared by all its keys (see docs/limits.md)"),
    true,
  ).action(async (name: string, options: Record<string, unknown>, command: Command) => {
    const change = limitChange(options, true);
    if (Object.keys(change).length === 0)
      throw new UsageError('nothing to change: give a limit such as --rpm 60');
    await withStore(command, async (store) => {
      const org = await store.orgs.byName(name);
      if (!org || !(await store.orgs.updateLimits(org.id, change)))
        throw new UsageError(`no organisation '${name}'`);
      process.stdout.write(`${org.name}  ${limitsSummary(await store.orgs.limits(org.id))}\n`);
    });
  });

  const keys = program.command('keys').description('manage API keys');
  limitOptions(keys.command('create'), false)
    .description('create an API key; the key is printed once, on stdout, and never stored')
    .requiredOption('--org <name>', 'organisation the key belongs to')
    .addOption(
      new Option('--tier <tier>', 'rate and model tier').choices(['free', 'standard']).default('standard'),
    )
    .option(
      '--admin',
      "give the key the admin role: the operator's, over every organisation, not only --org's",
    )
    .option('--name <label>', 'a label to recognise the key by in `kiln keys list`')
    .action(
      async (
        options: { org: string; tier: 'free' | 'standard'; admin?: boolean; name?: string },
        command: Command,
      ) => {
        const { KEY_NAME } = await import('../admin/schemas.js');
        if (options.name !== undefined && !KEY_NAME.test(options.name))
          throw new UsageError(
            'key names are 1–200 characters, none of them a control character (tab, newline)',
          );
        const limits = limitChange(options, false) as Limits;
        await withStore(command, async (store) => {
          const org = await store.orgs.byName(options.org);
          if (!org)
            throw new UsageError(
              `no organisation '${options.org}' (create it with: kiln orgs create ${options.org})`,
            );
          const { key, record } = await issueKey(store, {
            orgId: org.id,
            tier: options.tier,
            role: options.admin ? 'admin' : 'member',
            name: options.name ?? null,
            limits,
          });
          process.stderr.write(
            `created ${record.id} for organisation ${org.name} (tier ${record.tier}, role ${record.role}); store the key now, it is not shown again:\n`,
          );
          process.stdout.write(`${key}\n`);
        });
      },
    );
  keys
    .command('list')
    .description('list API keys (never the keys themselves)')
    .option('--org <name>', 'only this organisation')
    .action(async (options: { org?: string }, command: Command) => {
      await withStore(command, async (store) => {
        let orgId: string | undefined;
        if (options.org) {
          const org = await store.orgs.byName(options.org);
          if (!org) throw new UsageError(`no organisation '${options.org}'`);
          orgId = org.id;
        }
        const rows = (await store.keys.list(orgId)).map((k) => [
          k.id,
          k.org_name,
          `${k.prefix}…`,
          k.tier,
          k.role,
          k.name ?? '',
          limitsSummary(k.limits),
          isoTime(k.created_at),
          k.revoked_at === null ? 'active' : `revoked ${isoTime(k.revoked_at)}`,
        ]);
        process.stdout.write(
          `${table([['ID', 'ORG', 'KEY', 'TIER', 'ROLE', 'NAME', 'LIMITS', 'CREATED', 'STATUS'], ...rows])}\n`,
        );
      });
    });
  limitOptions(
    keys
      .command('update <id>')
      .description("change a live key's tier or limits (see docs/limits.md); it takes effect at once")
      .addOption(new Option('--tier <tier>', 'rate and model tier').choices(['free', 'standard'])),
    true,
  ).action(async (id: string, options: Record<string, unknown>, command: Command) => {
    const change = limitChange(options, true);
    const tier = options.tier as 'free' | 'standard' | undefined;
    if (Object.keys(change).length === 0 && !tier)
      throw new UsageError('nothing to change: give --tier or a limit such as --rpm 60');
    await withStore(command, async (store) => {
      const key = await store.keys.update(id, { limits: change, ...(tier ? { tier } : {}) });
      if (!key) throw new UsageError(`no active key with id ${id}`);
      process.stdout.write(`${key.id}  tier ${key.tier}  ${limitsSummary(key.limits)}\n`);
    });
  });
  keys
    .command('revoke <id>')
    .description('revoke an API key by its id (key_…); requests with it get 401 from then on')
    .action(async (id: string, _options, command: Command) => {
      await withStore(command, async (store) => {
        if (!(await store.keys.revoke(id))) throw new UsageError(`no active key with id ${id}`);
        process.stdout.write(`revoked ${id}\n`);
      });
    });

  program
    .command('webhooks')
    .description('webhook settings')
    .command('secret')
    .description(
      "print the organisation's webhook signing secret (created on first use); --rotate replaces it",
    )
    .requiredOption('--org <name>', 'organisation')
    .option('--rotate', 'replace the secret; receivers must switch to the new one')
    .action(async (options: { org: string; rotate?: boolean }, command: Command) => {
      await withStore(command, async (store) => {
        const org = await store.orgs.byName(options.org);
        if (!org) throw new UsageError(`no organisation '${options.org}'`);
        const secret = await store.orgs.setWebhookSecret(
          org.id,
          `whsec_${randomBase62(32)}`,
          !options.rotate,
        );
        process.stdout.write(`${secret}\n`);
      });
    });
}
