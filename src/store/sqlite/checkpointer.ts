import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * WAL checkpoints copy the log into the database and fsync it: tens of milliseconds, at worst
 * hundreds on a busy disk. Run on the event loop (SQLite's automatic checkpoint runs inside
 * whichever COMMIT crosses the threshold) they stall every request in flight. This thread does
 * them instead, on its own connection, every `everyMs`.
 *
 * A passive checkpoint never blocks the writer, but it cannot rewind the log either: SQLite starts
 * the WAL over only when a write begins after every frame was copied, and under steady writes new
 * frames always arrive while a pass runs. The log then grows for as long as the load lasts (242 MB
 * after 23,000 requests at 32 in flight). So once a pass leaves `restartFrames` or more in the log,
 * more passes follow until one leaves at most `tailFrames` uncopied, and then a RESTART checkpoint:
 * it takes the writer's lock, copies that tail, and makes the next write start the log over. New
 * commits wait for it (the whole checkpoint, lock wait included, took 9–17 ms under 32 requests in
 * flight); the file stays at the size it reached. A reader in another process holding an old
 * snapshot (`kiln backup`) would keep the restart waiting, commits with it, for as long as the busy
 * timeout: the restart gives up after `restartWaitMs` instead, and waits 5 passes before it tries
 * again.
 * A TRUNCATE checkpoint would also shrink the file, but held the writer for 50 ms and more.
 */
const CODE = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file);
// A restart holds new commits while it waits, and a reader in another process (a backup) can keep it
// waiting: it gives up after this long, and the log is not tried again for a while.
db.pragma('busy_timeout = ' + workerData.restartWaitMs);
const passive = () => db.pragma('wal_checkpoint(PASSIVE)')[0];
let restartAfter = 0;
const checkpoint = () => {
  try {
    let pass = passive();
    if (!pass || pass.log < workerData.restartFrames || Date.now() < restartAfter) return;
    // Each pass copies what arrived during the one before, so a few leave little behind; the
    // restart then holds the writer only for that.
    for (let i = 0; i < 4 && pass.log - pass.checkpointed > workerData.tailFrames; i++) pass = passive();
    const [restart] = db.pragma('wal_checkpoint(RESTART)');
    if (restart && restart.busy === 0) parentPort.postMessage('restarted');
    else restartAfter = Date.now() + workerData.everyMs * 5;
  } catch {}
};
const timer = setInterval(checkpoint, workerData.everyMs);
parentPort.on('message', () => { clearInterval(timer); checkpoint(); db.close(); parentPort.close(); });
`;

export interface CheckpointSettings {
  /** How often a passive checkpoint runs. */
  everyMs: number;
  /** Frames (pages) a passive checkpoint may leave in the log before it is started over: 16,384 is 64 MiB at 4 KiB pages. */
  restartFrames: number;
  /** What a restart may have left to copy: passive passes run first until no more is left than this. */
  tailFrames: number;
  /**
   * How long a restart waits for the writer and for readers in other processes before it gives up
   * (and is not tried again for 5 passes). Commits wait for it meanwhile.
   */
  restartWaitMs: number;
}

export const CHECKPOINT_DEFAULTS: CheckpointSettings = {
  everyMs: 1000,
  restartFrames: 16_384,
  tailFrames: 256,
  restartWaitMs: 100,
};

export interface Checkpointer {
  /** How many times the log was started over under load. */
  readonly restarts: number;
  stop(): Promise<void>;
}

export function startCheckpointer(
  file: string,
  settings: CheckpointSettings = CHECKPOINT_DEFAULTS,
): Checkpointer {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(CODE, { eval: true, workerData: { file, module, ...settings } });
  worker.unref();
  let restarts = 0;
  let stopped: Promise<void> | undefined;
  worker.on('message', () => {
    restarts++;
  });
  return {
    get restarts() {
      return restarts;
    },
    stop() {
      // Once: a second close finds the thread gone, and would wait for an exit already past.
      stopped ??= new Promise<void>((resolve) => {
        worker.once('exit', () => resolve());
        // Keep the process alive until the thread is gone, or an exit would cut the caller short.
        worker.ref();
        worker.postMessage('stop');
      });
      return stopped;
    },
  };
}
