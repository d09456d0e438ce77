// Holding a request at the router while instances are busy (routing.busy): which busy instance a
// request is worth waiting for, and the queue of waiters, in arrival order. Pure: the server's
// CapacityQueue (src/proxy/capacity.ts) adds timers and promises, the fleet simulator virtual-time
// events; both drive this one queue and the scheduler's one judgement.
import type { CandidateScore, Decision } from './scheduler.js';

/** One try of a waiter: it went (decided and booked), or it waits. */
export type HoldTry =
  | { go: true }
  | {
      /** Some candidate was under its busy thresholds: waiters behind may still find room. */
      anyFree: boolean;
    };

/** A decision that chose nothing, as the queue sees it: whether any candidate had room. */
export function waitOn(d: Decision): { anyFree: boolean } {
  for (const c of d.candidates) if (!c.busy) return { anyFree: true };
  return { anyFree: false };
}

/**
 * What the pick's cached prefix saves, in ms, against prefilling `elsewhereMs` on `alt`, whose queue
 * beyond the pick's is waited for too. The load bound (pickers.ts) and the hold judge by it.
 */
export function prefixSavingMs(pick: CandidateScore, elsewhereMs: number, alt: CandidateScore): number {
  return elsewhereMs + Math.max(0, alt.queueMs - pick.queueMs) - pick.prefillMs;
}

/**
 * The busy candidate worth waiting for instead of sending the request to `free` now (the pick among
 * the candidates under their thresholds), or null. A busy candidate holding more of the prompt than
 * `free` does is worth it when its prefix saving (as the load bound measures it) exceeds the wait:
 * its queue beyond `free`'s. While every candidate has prefill queued (saturation), the prefill it
 * saves counts `recomputeWeight` more, as kv prices it then (recompute_weight_saturated): a prefix
 * recomputed on a queueing instance delays every request after it, while a request held at the
 * router holds no engine. (A holder of a shared prefix is the loaded one: dropping it recomputes the
 * prefix cold; at llm-d's shape past saturation that collapsed the hit rate from 65 to 15-23 %.)
 * The largest margin wins.
 */
export function holderWorthWaiting(
  candidates: readonly CandidateScore[],
  busy: readonly CandidateScore[],
  free: CandidateScore,
  recomputeWeight: number,
): CandidateScore | null {
  let w = recomputeWeight;
  for (const c of candidates) if (c.load.activePrefillTokens <= 0) w = 0;
  let best: CandidateScore | null = null;
  let bestMargin = 0;
  for (const h of busy) {
    if (h.creditedBlocks <= free.creditedBlocks) continue;
    const saving = prefixSavingMs(h, free.prefillMs, free) + w * (free.prefillMs - h.prefillMs);
    const margin = saving - Math.max(0, h.queueMs - free.queueMs);
    if (margin > bestMargin) {
      bestMargin = margin;
      best = h;
    }
  }
  return best;
}

interface Waiter<W> {
  w: W;
  /** Requests of one pool (model) share capacity: FIFO per pool. */
  pool: string;
}

/**
 * Requests waiting for capacity, oldest first, bounded. A request of a pool with waiters joins the
 * tail (a new arrival does not overtake them for freed room); `pass` tries the waiters in order,
 * and those that went leave. Nothing here books: `tryOne` does,
 * before the next waiter is tried, so each sees the load the ones before it added.
 */
export class HoldQueue<W> {
  private readonly waiters: Waiter<W>[] = [];

  constructor(public maxSize: number) {}

  get depth(): number {
    return this.waiters.length;
  }

  /** Whether a request of `pool` must queue behind others. */
  waitingIn(pool: string): boolean {
    for (const x of this.waiters) if (x.pool === pool) return true;
    return false;
  }

  /** Join at the tail; false when the queue is full. */
  add(w: W, pool: string): boolean {
    if (this.waiters.length >= this.maxSize) return false;
    this.waiters.push({ w, pool });
    return true;
  }

  /** Leave the queue (gave up, aborted); false if not in it. */
  remove(w: W): boolean {
    const i = this.waiters.findIndex((x) => x.w === w);
    if (i < 0) return false;
    this.waiters.splice(i, 1);
    return true;
  }

  /** Everyone leaves (the caller ended their requests). */
  clear(): void {
    this.waiters.length = 0;
  }

  /**
   * Try each waiter in arrival order. A waiter that finds no candidate under its thresholds ends
   * the pass for its pool (no one behind it can go either). Returns the waiters that went, in order.
   */
  pass(tryOne: (w: W) => HoldTry): W[] {
    let full: Set<string> | null = null;
    const went: W[] = [];
    for (let i = 0; i < this.waiters.length; ) {
      const x = this.waiters[i];
      if (full?.has(x.pool)) {
        i++;
        continue;
      }
      const t = tryOne(x.w);
      if ('go' in t) {
        // (tryOne may not touch the queue: the index now points at the next waiter.)
        this.waiters.splice(i, 1);
        went.push(x.w);
        continue;
      }
      if (!t.anyFree) (full ??= new Set()).add(x.pool);
      i++;
    }
    return went;
  }
}
