import { accessSync, constants } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/**
 * Why a clipboard cannot work here, as one line: what is wrong and what to do about it.
 *
 * On Linux clipboardy reaches Wayland through wl-clipboard and X through xsel (its own bundled copy
 * when none is installed), and words its errors after the first program it tried: a stale DISPLAY
 * comes out as "install xsel". So the display is checked first, the programs second.
 */

type Env = NodeJS.ProcessEnv;
export type ClipboardUse = 'copy' | 'paste';

/** What clipboardy attaches to its X errors (the system xsel's, then its bundled copy's). */
interface ClipboardyError extends Error {
  xselError?: { stderr?: string };
  fallbackError?: { message?: string; stderr?: string };
}

/** Checked before trying: a Linux clipboard lives in a display server, and none is named. */
export function noDisplay(env: Env): string | undefined {
  if (process.platform !== 'linux' || env.DISPLAY || env.WAYLAND_DISPLAY) return undefined;
  return 'DISPLAY and WAYLAND_DISPLAY are unset: there is no desktop session to hold a clipboard';
}

/** Checked after clipboardy failed, in the order a fix must happen: display server, then program. */
export async function whyClipboardFailed(error: unknown, use: ClipboardUse, env: Env): Promise<string> {
  const failure = error as ClipboardyError;
  if (process.platform !== 'linux') return failure.message;
  // wl-copy or wl-paste failing on a live compositor is reported as such; clipboardy does not try X then.
  if (failure.message.startsWith('Command `wl-')) return failure.message;

  const wayland = env.WAYLAND_DISPLAY;
  if (wayland && !env.DISPLAY) {
    const program = use === 'copy' ? 'wl-copy' : 'wl-paste';
    if (!onPath(program, env.PATH)) {
      return `WAYLAND_DISPLAY=${wayland} is set but wl-clipboard is not installed: install it, e.g. \`sudo apt-get install wl-clipboard\``;
    }
    const socket = waylandSocket(wayland, env);
    if (!(await answers([{ path: socket }]))) {
      return `WAYLAND_DISPLAY=${wayland} is set but no Wayland compositor answers at ${socket}: run kiln inside the desktop session, or unset WAYLAND_DISPLAY`;
    }
  }

  const display = env.DISPLAY;
  if (display) {
    const server = xServer(display);
    if (!server)
      return `DISPLAY=${display} is not an X display name like :0 or localhost:10.0: correct or unset it`;
    if (!(await answers(server.addresses))) {
      return `DISPLAY=${display} is set but no X server answers there: ${server.remedy}, or unset DISPLAY`;
    }
    if (/Can't open display/i.test(failure.fallbackError?.stderr ?? failure.xselError?.stderr ?? '')) {
      return `the X server at DISPLAY=${display} refuses this user: run kiln as the desktop's user, or point XAUTHORITY at its cookie`;
    }
  }

  if (failure.message.startsWith("Couldn't find the `xsel` binary")) {
    const bundled = failure.fallbackError?.message
      ? ` fails with "${oneLine(failure.fallbackError.message)}"`
      : ' is missing';
    return `xsel is not installed and the one bundled with Kiln's clipboard library${bundled}: install xsel, e.g. \`sudo apt-get install xsel\``;
  }
  return oneLine(failure.fallbackError?.stderr || failure.xselError?.stderr || failure.message);
}

function onPath(program: string, searchPath = ''): boolean {
  return searchPath
    .split(path.delimiter)
    .filter(Boolean)
    .some((dir) => {
      try {
        accessSync(path.join(dir, program), constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}

function waylandSocket(name: string, env: Env): string {
  return path.isAbsolute(name)
    ? name
    : path.join(env.XDG_RUNTIME_DIR || `/run/user/${process.getuid?.()}`, name);
}

/** Where the X server of a DISPLAY value ([host]:number[.screen]) listens, and how one gets started. */
function xServer(display: string): { addresses: net.NetConnectOpts[]; remedy: string } | undefined {
  const match = /^([^:]*):(\d+)(\.\d+)?$/.exec(display);
  if (!match) return undefined;
  const [, host = '', number = '0'] = match;
  if (host === '' || host === 'unix') {
    const socket = `/tmp/.X11-unix/X${number}`;
    // Servers listen on the socket file, the abstract socket of the same name, or both.
    return {
      addresses: [{ path: socket }, { path: `\0${socket}` }],
      remedy: `start one with \`Xvfb :${number} &\``,
    };
  }
  return {
    addresses: [{ host, port: 6000 + Number(number) }],
    remedy: `check the X server or the ssh -X forwarding behind ${host}`,
  };
}

/** Whether anything accepts a connection at one of the addresses: cheap, and independent of any X program. */
async function answers(addresses: net.NetConnectOpts[], timeoutMs = 1000): Promise<boolean> {
  for (const address of addresses) {
    const connected = await new Promise<boolean>((resolve) => {
      const socket = net.connect(address);
      const done = (ok: boolean) => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(timeoutMs, () => done(false));
      socket.once('connect', () => done(true));
      socket.once('error', () => done(false));
    });
    if (connected) return true;
  }
  return false;
}

const oneLine = (text: string) => text.trim().replace(/\s*\n\s*/g, '; ');
