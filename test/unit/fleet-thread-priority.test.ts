// bench fleet's helper threads (router replicas' workers, the oracle's) lower their own scheduling
// priority so that the simulation's thread gets a core when it wakes: only their own thread's, never
// the process's (Linux: per thread, through /proc/thread-self).
import { getPriority } from 'node:os';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { builtFile } from '../../src/common/built-file.js';

/** The nice of a new worker thread before and after it lowers its priority by `by`. */
function niceInWorker(by: number): Promise<{ before: number; after: number }> {
  const script = builtFile(new URL('../../src/bench/fleet.js', import.meta.url).href, 'fleet/priority.js');
  if (!script) throw new Error('dist/bench/fleet/priority.js is not built: run `npm run build`');
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const { readlinkSync } = require('node:fs');
    const { getPriority } = require('node:os');
    const tid = Number(readlinkSync('/proc/thread-self').split('/')[2]);
    import(workerData.script).then(({ lowerThreadPriority }) => {
      const before = getPriority(tid);
      lowerThreadPriority(workerData.by);
      parentPort.postMessage({ before, after: getPriority(tid) });
    });`;
  return new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { script: pathToFileURL(script).href, by } });
    w.once('message', (m: { before: number; after: number }) => {
      resolve(m);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

describe('bench fleet: helper threads yield to the simulation', () => {
  it.skipIf(process.platform !== 'linux')('a thread lowers its own priority, not the process', async () => {
    const main = getPriority();
    const { before, after } = await niceInWorker(5);
    expect(before).toBe(main);
    expect(after).toBe(Math.min(19, before + 5));
    // The simulation's thread keeps its priority.
    expect(getPriority()).toBe(main);
    // Nothing asked: nothing changed.
    const zero = await niceInWorker(0);
    expect(zero.after).toBe(zero.before);
  });
});
