// A worker (instance, DP rank) as a key for the peers' tables: what they call a pod, worker or tenant.
import type { Candidate } from '../../scheduler.js';

export const workerKey = (c: Candidate): string => `${c.instance}\u0000${c.dpRank}`;

/** Whether a worker key belongs to an instance (any of its DP ranks). */
export const ofInstance = (key: string, instance: string): boolean => key.startsWith(`${instance}\u0000`);

/** Index of the lowest value, uniformly among equals; -1 for none. */
export function argminRandomTies(values: readonly number[], rand: () => number): number {
  let best = -1;
  let ties = 0;
  for (let i = 0; i < values.length; i++) {
    if (best >= 0 && values[i] > values[best]) continue;
    if (best < 0 || values[i] < values[best]) {
      best = i;
      ties = 1;
    } else if (rand() * ++ties < 1) best = i;
  }
  return best;
}
