import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The real `kiln` entry point; it imports dist/, so the suite runs after `npm run build`. */
export const KILN_BIN = fileURLToPath(new URL('../../bin/kiln.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  /**
   * The child's environment on top of PATH and HOME; nothing else of the test's environment leaks
   * in (no KILN_*, DISPLAY or WAYLAND_DISPLAY). An undefined value leaves the variable out.
   */
  env?: Record<string, string | undefined>;
  /** Piped to the child's stdin; without it stdin is /dev/null. */
  input?: string | Buffer;
  /** Preferably a directory without kiln.yaml or ./data, so the child reads only the configuration given. */
  cwd?: string;
  /** The child is killed after this long (default 15 s) and the call fails: a hang is an error, not a wait. */
  timeoutMs?: number;
}

export type Kiln = (args: string[], options?: CliOptions) => Promise<CliResult>;

/** Runs `node bin/kiln.js …args` as a child process; answers its exit code and output, whatever the code. */
export const kiln: Kiln = (args, options = {}) => {
  const env: Record<string, string> = {};
  for (const name of ['PATH', 'HOME', 'TMPDIR', 'LANG']) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  for (const [name, value] of Object.entries(options.env ?? {})) {
    if (value === undefined) delete env[name];
    else env[name] = value;
  }
  const timeoutMs = options.timeoutMs ?? 15_000;

  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [KILN_BIN, ...args], {
      env,
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      const result = {
        code,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
      };
      if (timedOut) {
        reject(new Error(`kiln ${args.join(' ')} ran over ${timeoutMs} ms: ${JSON.stringify(result)}`));
      } else {
        resolve(result);
      }
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
};

/** A `kiln` runner with fixed defaults (cwd, environment); per-call env entries add to or override them. */
export function kilnWith(defaults: CliOptions): Kiln {
  return (args, options = {}) =>
    kiln(args, { ...defaults, ...options, env: { ...defaults.env, ...options.env } });
}
