// bench fleet's helper threads (the router replicas' workers, the oracle's) yield the cores to the
// simulation's thread, which is the run's critical path: each lowers its own scheduling priority.
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/**
 * This thread's scheduling priority `by` below the process's (Linux: the thread's id from
 * /proc/thread-self; elsewhere, or refused, it stays as it is).
 */
export function lowerThreadPriority(by: number): void {
  if (by <= 0) return;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/')[2]);
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, Math.min(19, getPriority(tid) + by));
  } catch {
    // (No per-thread priority here: the run is the same, only its threads' shares of the cores differ.)
  }
}
