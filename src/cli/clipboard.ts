import clipboard from 'clipboardy';
import { UsageError } from './common.js';

/** Linux clipboards live in a display server; without one there is nothing to copy to. */
function displayMissing(env: NodeJS.ProcessEnv): boolean {
  return process.platform === 'linux' && !env.DISPLAY && !env.WAYLAND_DISPLAY;
}

function unavailable(reason: string, instead: string): UsageError {
  return new UsageError(`no clipboard is available (${reason}); ${instead}`);
}

export async function copyToClipboard(text: string, env = process.env): Promise<void> {
  const instead = 'use --stdout to print the content instead';
  if (displayMissing(env)) throw unavailable('no display: DISPLAY and WAYLAND_DISPLAY are unset', instead);
  try {
    await clipboard.write(text);
  } catch (error) {
    throw unavailable((error as Error).message, instead);
  }
}

export async function readClipboard(env = process.env): Promise<string> {
  const instead = 'pass the content with -c <content>, --file <path> or on stdin';
  if (displayMissing(env)) throw unavailable('no display: DISPLAY and WAYLAND_DISPLAY are unset', instead);
  try {
    return await clipboard.read();
  } catch (error) {
    throw unavailable((error as Error).message, instead);
  }
}
