import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { configKeys, loadConfig } from '../../src/config/load.js';
import { kiln } from '../helpers/cli.js';
import { startTestServer } from '../helpers/server.js';

// No container runtime here: these tests check what Docker and Compose would be handed — the
// Dockerfile's instructions, compose.yaml's services and environment — against the repository,
// the CLI and the real config loader.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (name: string) => readFileSync(path.join(ROOT, name), 'utf8');
const pkg = JSON.parse(read('package.json')) as {
  scripts: Record<string, string>;
  bin: Record<string, string>;
  allowScripts: Record<string, boolean>;
};
const scratch = mkdtempSync(path.join(tmpdir(), 'kiln-container-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
/** Stands for "no kiln.yaml", so a stray ./kiln.yaml in the checkout cannot change the outcome. */
const NO_FILE = path.join(scratch, 'empty.yaml');
writeFileSync(NO_FILE, '');

// --- The Dockerfile ---------------------------------------------------------------------------

interface Instruction {
  keyword: string;
  args: string;
  /** Index of the build stage (FROM) the instruction belongs to. */
  stage: number;
}

/** Instructions with continuation lines joined and comments dropped, as Docker reads them. */
function parseDockerfile(text: string): Instruction[] {
  const instructions: Instruction[] = [];
  let pending = '';
  let stage = -1;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1).trim()} `;
      continue;
    }
    const [, keyword = '', args = ''] = /^(\S+)\s*(.*)$/.exec(pending + line) ?? [];
    pending = '';
    if (keyword.toUpperCase() === 'FROM') stage += 1;
    instructions.push({ keyword: keyword.toUpperCase(), args, stage });
  }
  return instructions;
}

/** `--name=value` flags, then the rest. */
function splitFlags(args: string): { flags: Record<string, string>; rest: string } {
  const flags: Record<string, string> = {};
  let rest = args;
  for (let m = /^--([a-z-]+)=(\S+)\s*/.exec(rest); m; m = /^--([a-z-]+)=(\S+)\s*/.exec(rest)) {
    flags[m[1] as string] = m[2] as string;
    rest = rest.slice(m[0].length);
  }
  return { flags, rest };
}

/** A command in exec form (a JSON array); shell form is refused, since signals would go to a shell. */
const execForm = (args: string): string[] => {
  expect(args.startsWith('['), `not in exec form: ${args}`).toBe(true);
  return JSON.parse(args) as string[];
};

/** The commands chained with `&&` in every RUN of a stage. */
const commandsOf = (instructions: Instruction[], stage: number) =>
  instructions
    .filter((i) => i.keyword === 'RUN' && i.stage === stage)
    .flatMap((i) => i.args.split('&&').map((c) => c.trim().split(/\s+/)));

/** Whether .dockerignore lets a path of the build context into the build (last matching line wins). */
function admitted(file: string, ignore: string): boolean {
  const patterns = ignore
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const segments = path.posix.normalize(file).split('/');
  let inside = true;
  for (const pattern of patterns) {
    const negated = pattern.startsWith('!');
    const glob = path.posix.normalize(negated ? pattern.slice(1) : pattern).replace(/\/$/, '');
    const regex = new RegExp(
      `^${glob
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join('[^/]*')}$`,
    );
    // A pattern that matches a directory covers everything under it.
    if (segments.some((_, i) => regex.test(segments.slice(0, i + 1).join('/')))) inside = negated;
  }
  return inside;
}

const dockerfile = parseDockerfile(read('Dockerfile'));
const dockerignore = read('.dockerignore');
const stages = dockerfile.filter((i) => i.keyword === 'FROM');
const finalStage = stages.length - 1;
const inFinal = (keyword: string) =>
  dockerfile.filter((i) => i.keyword === keyword && i.stage === finalStage);
const last = <T>(items: T[]): T | undefined => items[items.length - 1];

/** The ENV of the final stage: what every container of the image starts with. */
const imageEnv: Record<string, string> = {};
for (const { args } of inFinal('ENV')) {
  for (const m of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S+)/g)) imageEnv[m[1] as string] = m[2] as string;
}

/** The WORKDIR in force at each instruction, to resolve relative destinations. */
function workdirAt(index: number): string {
  const { stage } = dockerfile[index] as Instruction;
  const set = dockerfile.slice(0, index).filter((i) => i.keyword === 'WORKDIR' && i.stage === stage);
  return last(set)?.args ?? '/';
}

interface Copy {
  from: string | undefined;
  sources: string[];
  /** Where each source lands in the image. */
  targets: string[];
  stage: number;
}

const copies: Copy[] = dockerfile.flatMap((instruction, index) => {
  if (instruction.keyword !== 'COPY') return [];
  const { flags, rest } = splitFlags(instruction.args);
  const parts = rest.split(/\s+/);
  const dest = path.posix.resolve(workdirAt(index), parts[parts.length - 1] as string);
  const sources = parts.slice(0, -1);
  const intoDir = rest.trimEnd().endsWith('/') || sources.length > 1;
  const targets = sources.map((s) => (intoDir ? path.posix.join(dest, path.posix.basename(s)) : dest));
  return [{ from: flags.from, sources, targets, stage: instruction.stage }];
});

/** The build-context path an image path of the final stage was copied from, if it was. */
function contextPathOf(imagePath: string): string | undefined {
  for (const copy of copies.filter((c) => c.stage === finalStage && c.from === undefined)) {
    for (const [i, target] of copy.targets.entries()) {
      const under = path.posix.relative(target, imagePath);
      if (!under.startsWith('..')) return path.posix.join(copy.sources[i] as string, under);
    }
  }
  return undefined;
}

const kilnBin = path.posix.normalize(pkg.bin.kiln as string);

describe('Dockerfile', () => {
  it('builds in stages, and the image runs as a user other than root', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(stages.every((s) => / node:20-bookworm-slim( |$)/.test(` ${s.args}`))).toBe(true);
    const user = last(inFinal('USER'))?.args;
    expect(user, 'the final stage sets no USER, so it runs as root').toBeDefined();
    expect(['root', '0']).not.toContain(user?.split(':')[0]);
  });

  it('copies from the build context only files that exist and that .dockerignore lets in', () => {
    const fromContext = copies.filter((c) => c.from === undefined).flatMap((c) => c.sources);
    expect(fromContext.length).toBeGreaterThan(0);
    for (const source of fromContext) {
      expect(existsSync(path.join(ROOT, source)), `${source} is not in the repository`).toBe(true);
      expect(admitted(source, dockerignore), `.dockerignore keeps ${source} out of the build`).toBe(true);
    }
    // Nothing built locally or private leaks in.
    for (const outside of ['node_modules', 'dist', 'data', '.git', 'kiln.yaml', '.env', 'test']) {
      expect(admitted(outside, dockerignore), `${outside} reaches the build`).toBe(false);
    }
  });

  it('copies from an earlier stage only what that stage copied in or built', () => {
    const outDir = (JSON.parse(read('tsconfig.build.json')) as { compilerOptions: { outDir: string } })
      .compilerOptions.outDir;
    for (const copy of copies.filter((c) => c.from !== undefined)) {
      const from = stages.findIndex((s) => s.args.split(/\s+/).slice(-1)[0] === copy.from);
      expect(from, `no stage named ${copy.from}`).toBeGreaterThanOrEqual(0);
      expect(from).toBeLessThan(copy.stage);
      const workdir = last(dockerfile.filter((i) => i.keyword === 'WORKDIR' && i.stage === from))?.args;
      const commands = commandsOf(dockerfile, from).map((c) => c.join(' '));
      const produced = [
        ...copies.filter((c) => c.stage === from).flatMap((c) => c.targets),
        ...(commands.some((c) => c.startsWith('npm ci')) ? [`${workdir}/node_modules`] : []),
        ...(commands.includes('npm run build') ? [path.posix.join(workdir ?? '/', outDir)] : []),
      ];
      for (const source of copy.sources) expect(produced).toContain(source);
    }
  });

  it('runs only npm scripts that package.json has', () => {
    const runs = stages
      .flatMap((_, stage) => commandsOf(dockerfile, stage))
      .filter((c) => c[0] === 'npm' && c[1] === 'run');
    expect(runs.length).toBeGreaterThan(0);
    for (const c of runs) expect(Object.keys(pkg.scripts)).toContain(c[2]);
  });

  it("runs the install scripts of exactly the packages package.json's allowScripts allows", () => {
    const commands = stages.flatMap((_, stage) => commandsOf(dockerfile, stage));
    const installs = commands.filter((c) => c[0] === 'npm' && (c[1] === 'ci' || c[1] === 'prune'));
    for (const c of installs)
      expect(c, 'an npm install that runs every script').toContain('--ignore-scripts');
    const rebuilt = commands.filter((c) => c[0] === 'npm' && c[1] === 'rebuild').flatMap((c) => c.slice(2));
    const allowed = Object.entries(pkg.allowScripts)
      .filter(([, allow]) => allow)
      .map(([name]) => name);
    expect(rebuilt.sort()).toEqual(allowed.sort());
  });

  it('starts a real `kiln` command from the bin package.json names, with the node options its shebang names', async () => {
    const [entry] = inFinal('ENTRYPOINT');
    const [cmd] = inFinal('CMD');
    const [node, ...rest] = [...execForm(entry?.args ?? '[]'), ...execForm(cmd?.args ?? '[]')];
    expect(node).toBe('node');
    // Node's own options come before the script (V8 reads its flags when it starts): the image, the
    // bin run by `kiln …` and `npm start` all give the gateway the same ones.
    const nodeOptions = rest.slice(
      0,
      rest.findIndex((arg) => !arg.startsWith('-')),
    );
    const shebang = /^#!\/usr\/bin\/env -S node(?: (.*))?\n/.exec(read(pkg.bin.kiln as string));
    expect(shebang, 'the bin runs node with options through env -S').not.toBeNull();
    const binOptions = shebang?.[1]?.split(' ') ?? [];
    expect(nodeOptions).toEqual(binOptions);
    expect(pkg.scripts.start).toBe(['node', ...binOptions, pkg.bin.kiln, 'start'].join(' '));
    const argv: string[] = [node as string, ...rest.slice(nodeOptions.length)];
    expect(contextPathOf(argv[1] as string)).toBe(kilnBin);
    // `kiln` on PATH (for `docker compose exec gateway kiln keys list`) is the same file.
    const link = commandsOf(dockerfile, finalStage).find((c) => c[0] === 'ln');
    expect(link?.slice(0, 2)).toEqual(['ln', '-s']);
    expect(contextPathOf(link?.[2] as string)).toBe(kilnBin);

    const help = await kiln([...argv.slice(2), '--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain(`Usage: kiln ${argv.slice(2).join(' ')}`);
  });

  it('sets only KILN_* variables the config loader reads, and exposes the port the gateway binds', () => {
    const known = new Set(configKeys().map((k) => k.env));
    for (const name of Object.keys(imageEnv).filter((n) => n.startsWith('KILN_'))) {
      expect(known.has(name), `${name} is not a configuration key`).toBe(true);
    }
    const config = loadConfig({ env: imageEnv, file: NO_FILE });
    expect(config.host).toBe('0.0.0.0');
    expect(inFinal('EXPOSE').map((i) => i.args)).toEqual([String(config.port)]);
    expect(inFinal('VOLUME').map((i) => i.args)).toEqual([config.data_dir]);
  });

  describe('its health check', () => {
    const check = last(inFinal('HEALTHCHECK'));
    const { rest } = splitFlags(check?.args ?? '');
    const argv: string[] = rest.startsWith('CMD [') ? JSON.parse(rest.slice(4)) : [];
    /** Runs the check as Docker would, with the image's environment plus `env`; answers its exit code. */
    const runCheck = (env: Record<string, string>) =>
      new Promise<number | null>((resolve, reject) => {
        expect(argv[0], `HEALTHCHECK is not a node command in exec form: ${check?.args}`).toBe('node');
        const child = spawn(process.execPath, argv.slice(1), {
          env: { ...imageEnv, ...env },
          stdio: 'ignore',
        });
        child.once('error', reject);
        child.once('exit', resolve);
      });

    it('passes while the gateway answers /readyz', async () => {
      expect(argv.join(' ')).toContain('/readyz');
      const dir = mkdtempSync(path.join(scratch, 'store-'));
      const gateway = await startTestServer({
        name: 'sqlite',
        skip: undefined,
        fresh: () => ({
          store: { url: `sqlite:${path.join(dir, 'kiln.db')}`, schema: 'public', pool_size: 5 },
          cleanup: async () => undefined,
        }),
      });
      const port = new URL(gateway.url).port;
      try {
        expect(await runCheck({ KILN_PORT: port })).toBe(0);
      } finally {
        await gateway.close();
      }
      // Nothing listens there any more.
      expect(await runCheck({ KILN_PORT: port })).toBe(1);
    });

    it('fails while /readyz answers an error (the store is down)', async () => {
      const unready = createServer((request, response) => {
        response.statusCode = request.url === '/readyz' ? 503 : 200;
        response.end('{}');
      });
      await new Promise<void>((resolve) => unready.listen(0, '127.0.0.1', resolve));
      try {
        const { port } = unready.address() as AddressInfo;
        expect(await runCheck({ KILN_PORT: String(port) })).toBe(1);
      } finally {
        await new Promise((resolve) => unready.close(resolve));
      }
    });
  });
});

// --- compose.yaml ------------------------------------------------------------------------------

interface Service {
  build?: string;
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  healthcheck?: { test?: string[]; disable?: boolean };
  depends_on?: Record<string, { condition: string }>;
}

/** Compose's `${NAME:-default}` interpolation with an empty shell: what `docker compose up` gets by default. */
const withoutDefault = new Set<string>();
function interpolate<T>(value: T): T {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}/g, (_, name: string, fallback) => {
      if (fallback === undefined) withoutDefault.add(name);
      return fallback ?? '';
    }) as T;
  }
  if (Array.isArray(value)) return value.map(interpolate) as T;
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v)])) as T;
  }
  return value;
}

const composeText = read('compose.yaml');
const compose = interpolate(parseYaml(composeText, { merge: true })) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};
const { gateway, worker, postgres } = compose.services as Record<string, Service>;

/** The configuration a Kiln service of compose.yaml starts with, loaded by the real loader. */
function serviceConfig(service: Service) {
  const env: Record<string, string> = { ...imageEnv, ...service.environment };
  if (env.KILN_CONFIG) {
    // The file is a bind mount: read the host side of it.
    const mount = service.volumes?.map((v) => v.split(':')).find((v) => v[1] === env.KILN_CONFIG);
    expect(mount, `nothing is mounted at KILN_CONFIG=${env.KILN_CONFIG}`).toBeDefined();
    env.KILN_CONFIG = path.join(ROOT, mount?.[0] as string);
  }
  return loadConfig({ env, file: env.KILN_CONFIG ?? NO_FILE });
}

describe('compose.yaml', () => {
  it('runs postgres, the gateway and a worker, both Kiln services built from this Dockerfile', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['gateway', 'postgres', 'worker']);
    for (const service of [gateway, worker]) {
      expect(service?.build).toBe('.');
      expect(service?.image).toBe(gateway?.image);
    }
    expect(postgres?.image).toMatch(/^postgres:\d+/);
  });

  it('works without a .env: every variable it interpolates has a default', () => {
    expect(composeText).toMatch(/\$\{/);
    expect([...withoutDefault]).toEqual([]);
  });

  it('gives the gateway and the worker only KILN_* variables the config loader reads', () => {
    const known = new Set([...configKeys().map((k) => k.env), 'KILN_CONFIG']);
    for (const service of [gateway, worker]) {
      const names = Object.keys(service?.environment ?? {});
      expect(names.length).toBeGreaterThan(0);
      for (const name of names) expect(known.has(name), `${name} is read by no one`).toBe(true);
    }
  });

  it('configures both on the postgres service, the shared data volume and the example fleet', () => {
    const pg = postgres?.environment ?? {};
    for (const service of [gateway, worker] as Service[]) {
      const config = serviceConfig(service);
      const store = new URL(config.store.url);
      expect(store.protocol).toBe('postgres:');
      expect(store.hostname).toBe('postgres');
      expect([store.username, store.password, store.pathname]).toEqual([
        pg.POSTGRES_USER,
        pg.POSTGRES_PASSWORD,
        `/${pg.POSTGRES_DB}`,
      ]);
      expect(config.host).toBe('0.0.0.0');
      // Produced files are written by whichever process ran the job and served by the gateway.
      expect(service.volumes).toContain(`kiln-data:${config.data_dir}`);
      expect(Object.keys(compose.volumes)).toContain('kiln-data');
      expect(Object.keys(config.engines).length).toBeGreaterThan(0);
      expect(config.configFile).toBe(path.join(ROOT, 'examples/compose/kiln.yaml'));
    }
    // `kiln worker` refuses to start with no job slots.
    expect(serviceConfig(worker as Service).jobs.workers).toBeGreaterThan(0);
  });

  it('publishes the gateway on the port it binds, at the address its public URL names', () => {
    const config = serviceConfig(gateway as Service);
    const [published] = gateway?.ports ?? [];
    const parts = published?.split(':') ?? [];
    expect(parts[parts.length - 1]).toBe(String(config.port));
    expect(new URL(config.public_url).host).toBe(parts.slice(0, -1).join(':'));
  });

  it('starts the services with real `kiln` commands', async () => {
    for (const [service, expected] of [
      [gateway, 'serve'],
      [worker, 'worker'],
    ] as const) {
      expect(service?.command).toEqual([expected]);
      const help = await kiln([...(service?.command ?? []), '--help']);
      expect(help.code, help.stderr).toBe(0);
      expect(help.stdout).toContain(`Usage: kiln ${expected}`);
    }
  });

  it('starts Kiln once PostgreSQL is ready, and health-checks only what serves HTTP', () => {
    expect(postgres?.healthcheck?.test).toContain('pg_isready');
    for (const service of [gateway, worker]) {
      expect(service?.depends_on?.postgres?.condition).toBe('service_healthy');
    }
    // The gateway keeps the image's /readyz check; the worker has no HTTP to check.
    expect(gateway?.healthcheck).toBeUndefined();
    expect(worker?.healthcheck?.disable).toBe(true);
  });
});
