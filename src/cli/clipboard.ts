import clipboard from 'clipboardy';
import { type ClipboardUse, noDisplay, whyClipboardFailed } from './clipboard-diagnosis.js';
import { UsageError } from './common.js';

const INSTEAD: Record<ClipboardUse, string> = {
  copy: 'use --stdout to print the content instead',
  paste: 'pass the content with -c <content>, --file <path> or on stdin',
};

/** Runs one clipboard operation; any failure becomes one line saying why and what to do instead. */
async function withClipboard<T>(
  use: ClipboardUse,
  env: NodeJS.ProcessEnv,
  run: () => Promise<T>,
): Promise<T> {
  const missing = noDisplay(env);
  if (missing) throw unavailable(missing, use);
  try {
    return await run();
  } catch (error) {
    throw unavailable(await whyClipboardFailed(error, use, env), use);
  }
}

function unavailable(reason: string, use: ClipboardUse): UsageError {
  return new UsageError(`no clipboard is available (${reason}); ${INSTEAD[use]}`);
}

export function copyToClipboard(text: string, env = process.env): Promise<void> {
  return withClipboard('copy', env, () => clipboard.write(text));
}

export function readClipboard(env = process.env): Promise<string> {
  return withClipboard('paste', env, () => clipboard.read());
}
