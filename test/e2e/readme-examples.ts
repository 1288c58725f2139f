import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { KILN_BIN } from '../helpers/cli.js';
import { REPO_ROOT } from '../helpers/process.js';

/** README.md as it is now: the tests read their examples from it, so an edit that breaks one fails. */
export const README = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');

/** One example of the README: a fenced block, or one `# comment`-led group of a block of several. */
export interface ReadmeExample {
  /** The heading it sits under. */
  section: string;
  /** The fence's language tag (`sh`, `json`, …; empty when none). */
  lang: string;
  /** What names it: the group's leading comment, else the block's first line. */
  title: string;
  /** The example's lines, as a reader copies them. */
  text: string;
}

/**
 * The README's examples, in order. A block whose blank-line-separated groups each open with a
 * `# comment` (the "Use it" walk-through) is several examples, one per group; any other block is one.
 */
export function readmeExamples(markdown: string = README): ReadmeExample[] {
  const examples: ReadmeExample[] = [];
  let section = '';
  let fence: { lang: string; lines: string[] } | undefined;
  for (const line of markdown.split('\n')) {
    if (fence) {
      if (line.startsWith('```')) {
        examples.push(...splitBlock(section, fence.lang, fence.lines));
        fence = undefined;
      } else {
        fence.lines.push(line);
      }
    } else if (line.startsWith('```')) {
      fence = { lang: line.slice(3).trim(), lines: [] };
    } else if (/^#{1,6} /.test(line)) {
      section = line.replace(/^#+ /, '');
    }
  }
  return examples;
}

function splitBlock(section: string, lang: string, lines: string[]): ReadmeExample[] {
  const groups = lines
    .join('\n')
    .split(/\n\s*\n/)
    .filter((group) => group.trim() !== '');
  const commented = groups.length > 1 && groups.every((group) => group.startsWith('# '));
  if (!commented) {
    return [{ section, lang, title: (lines[0] ?? '').trim(), text: lines.join('\n') }];
  }
  return groups.map((text) => ({ section, lang, title: (text.split('\n')[0] as string).slice(2), text }));
}

/** The example of `section` whose title starts with `titleStart`; throws when the README has none. */
export function readmeExample(section: string, titleStart: string): ReadmeExample {
  const found = readmeExamples().find((e) => e.section === section && e.title.startsWith(titleStart));
  if (!found) throw new Error(`README.md has no example "${titleStart}…" under "${section}"`);
  return found;
}

/** `N` strings. */
export type Commands<N extends number, T extends string[] = []> = T['length'] extends N
  ? T
  : Commands<N, [...T, string]>;

/**
 * An example's `count` commands: comment lines dropped, a line ending in `\` joined with the next.
 * Throws when the README has more or fewer, as the test would no longer run all of them.
 */
export function commandsOf<N extends number>(example: ReadmeExample, count: N): Commands<N> {
  const commands: string[] = [];
  let pending = '';
  for (const line of example.text.split('\n')) {
    if (pending === '' && (line.trim() === '' || line.trimStart().startsWith('#'))) continue;
    pending += pending === '' ? line : `\n${line}`;
    if (!line.endsWith('\\')) {
      commands.push(pending);
      pending = '';
    }
  }
  if (pending !== '') commands.push(pending);
  if (commands.length !== count) {
    throw new Error(`README.md's "${example.title}" has ${commands.length} commands, not ${count}`);
  }
  return commands as Commands<N>;
}

/**
 * `command` with each of `values`' placeholders (`<file_id>`, `key_0193…`) replaced by what a reader
 * would put there; a placeholder the command lacks throws, as the README no longer says what the test runs.
 */
export function fill(command: string, values: Record<string, string>): string {
  let filled = command;
  for (const [placeholder, value] of Object.entries(values)) {
    if (!filled.includes(placeholder)) throw new Error(`"${command}" has no ${placeholder}`);
    filled = filled.replaceAll(placeholder, value);
  }
  return filled;
}

/**
 * A bash function that makes the README's `npx kiln …` run `node bin/kiln.js …` (what npx resolves it
 * to in a clone) without npm's start-up time, and makes any other `npx` fail rather than reach a registry.
 */
export const NPX_KILN = `npx() {
  if [ "$1" != kiln ]; then echo "npx $1: only npx kiln runs in these tests" >&2; return 127; fi
  shift; node '${KILN_BIN}' "$@"
}
`;

export interface ShellResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * A bash in `cwd` with only `env` (and PATH), stdin /dev/null: it runs README lines as written, except
 * that the gateway's address is the test's and `npx kiln` is NPX_KILN. Answers the exit code, whatever
 * it is; a command still running after 30 s is killed and fails.
 */
export function readmeShell(cwd: string, baseUrl: () => string, env: () => Record<string, string>) {
  return (command: string): Promise<ShellResult> =>
    new Promise((resolve, reject) => {
      const script = NPX_KILN + command.replaceAll('http://127.0.0.1:8080', baseUrl());
      // --norc: Node's pipes are sockets, which bash would otherwise take for sshd and read ~/.bashrc.
      const child = spawn('bash', ['--norc', '-c', script], {
        cwd,
        // A HOME, as every reader has: xsel (clipboardy's, under X) crashes without one.
        env: { PATH: process.env.PATH ?? '', HOME: cwd, ...env() },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk;
      });
      child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
        stderr += chunk;
      });
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        if (code === null) reject(new Error(`${command}: killed by ${signal}; stderr: ${stderr}`));
        else resolve({ code, stdout, stderr });
      });
    });
}

/**
 * A fresh directory laid out like a built clone (package.json, bin, dist, workflows, node_modules,
 * and the examples/ and docs/ the README's commands read), each linked to this checkout, so that
 * `npm start` and the commands' `./data`, `clips/` and `transition.json` land in it and not here.
 */
export function makeClone(): { dir: string; remove(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'kiln-readme-'));
  for (const entry of ['package.json', 'bin', 'dist', 'workflows', 'node_modules', 'examples', 'docs']) {
    symlinkSync(path.join(REPO_ROOT, entry), path.join(dir, entry));
  }
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface Gateway {
  /** Where it listens, as its banner says (`http://127.0.0.1:<port>`). */
  url: string;
  /** Everything it printed so far. */
  output(): string;
  /** SIGTERM to the whole process group (npm does not pass signals on), then waits for every member. */
  stop(): Promise<void>;
}

/**
 * Runs `command` (the README's `npm start`) in `cwd` in a process group of its own, and resolves once
 * `kiln dev`'s banner names the address. The port is chosen by the system (KILN_PORT=0), as the
 * README's `KILN_PORT=8081 npm start` picks one.
 */
export function startGateway(command: string, cwd: string): Promise<Gateway> {
  const child: ChildProcess = spawn('bash', ['--norc', '-c', command], {
    cwd,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? cwd,
      KILN_PORT: '0',
      npm_config_update_notifier: 'false',
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const group = child.pid as number;
  const killGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-group, signal);
    } catch {
      // The group is gone already.
    }
  };
  const onExit = () => killGroup('SIGKILL');
  process.once('exit', onExit);
  // Every member holds the stdout pipe: it closes once the last of them is gone.
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  let seen = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    seen += chunk;
  });
  const stop = async () => {
    killGroup('SIGTERM');
    const timer = setTimeout(() => killGroup('SIGKILL'), 10_000);
    await closed;
    clearTimeout(timer);
    process.off('exit', onExit);
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`${command}: no "Kiln dev is running at" in 25 s: ${seen}`));
    }, 25_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited with ${code}: ${seen}`));
    });
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      seen += chunk;
      const match = /Kiln dev is running at (\S+)\/v1/.exec(seen);
      if (match) {
        clearTimeout(timer);
        resolve({ url: match[1] as string, output: () => seen, stop });
      }
    });
  });
}
