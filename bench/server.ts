import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const root = path.join(import.meta.dirname, '..');

/** `kiln serve` in a process of its own, so the load generator does not share its event loop. */
export async function spawnGateway(
  env: Record<string, string>,
): Promise<{ url: string; key: string; stop(): Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-bench-'));
  const child: ChildProcess = spawn(process.execPath, [path.join(root, 'bin', 'kiln.js'), 'serve'], {
    env: { ...process.env, KILN_DATA_DIR: dataDir, KILN_PORT: '0', KILN_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buffered = '';
    child.once('exit', (code) => reject(new Error(`kiln serve exited with ${code}`)));
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      for (const line of buffered.split('\n')) {
        if (line.includes('kiln is listening')) resolve((JSON.parse(line) as { url: string }).url);
      }
    });
  });
  child.stdout?.resume();
  return {
    url,
    key: readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim(),
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
