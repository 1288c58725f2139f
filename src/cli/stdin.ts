import { fstatSync } from 'node:fs';

/** How long a pipe on stdin may stay silent before a command that has its input already goes on. */
export const STDIN_GRACE_MS = 1000;

/**
 * What is piped on stdin, for a command that has its input from its arguments and must not drop
 * piped text unseen: undefined when stdin is a terminal, /dev/null or closed. A pipe is read to
 * its end once it sends a byte or closes within `graceMs`; one that does neither (a parent that
 * leaves stdin open and writes nothing, `ssh host kiln …`) is left alone, saying so on stderr,
 * so that the command never hangs on input nobody sends.
 */
export async function pipedInput(graceMs = STDIN_GRACE_MS): Promise<Buffer | undefined> {
  let kind: 'none' | 'file' | 'stream';
  try {
    const stats = fstatSync(0);
    kind = stats.isCharacterDevice() ? 'none' : stats.isFile() ? 'file' : 'stream';
  } catch {
    kind = 'none';
  }
  if (kind === 'none' || process.stdin.isTTY) return undefined;

  const stdin = process.stdin;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const timer =
      kind === 'stream'
        ? setTimeout(() => {
            stdin.removeAllListeners('data').removeAllListeners('end');
            stdin.destroy();
            process.stderr.write(
              `kiln: stdin is a pipe that sent nothing within ${graceMs / 1000} s; going on without it\n`,
            );
            resolve(undefined);
          }, graceMs)
        : undefined;
    stdin.on('data', (chunk: Buffer) => {
      clearTimeout(timer);
      chunks.push(chunk);
    });
    stdin.once('end', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
    stdin.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}
