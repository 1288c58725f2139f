import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * WAL checkpoints copy the log into the database and fsync it: tens of milliseconds, at worst
 * hundreds on a busy disk. Run on the event loop (SQLite's automatic checkpoint runs inside
 * whichever COMMIT crosses the threshold) they stall every request in flight. This thread does
 * them instead, on its own connection, every `everyMs`.
 */
const CODE = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file);
db.pragma('busy_timeout = 5000');
const checkpoint = () => { try { db.pragma('wal_checkpoint(PASSIVE)'); } catch {} };
const timer = setInterval(checkpoint, workerData.everyMs);
parentPort.on('message', () => { clearInterval(timer); checkpoint(); db.close(); parentPort.close(); });
`;

export interface Checkpointer {
  stop(): Promise<void>;
}

export function startCheckpointer(file: string, everyMs = 1000): Checkpointer {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(CODE, { eval: true, workerData: { file, module, everyMs } });
  worker.unref();
  return {
    async stop() {
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      // Keep the process alive until the thread is gone, or an exit would cut the caller short.
      worker.ref();
      worker.postMessage('stop');
      await exited;
    },
  };
}
