// Holding a request at the router while instances are busy (routing.busy): which busy instance a
// request is worth waiting for, and the queue of waiters, in arrival order. Pure: the server's
// CapacityQueue (src/proxy/capacity.ts) adds timers and promises, the fleet simulator virtual-time
// events; both drive this one queue and the scheduler's one judgement.
import type { CandidateScore, Decision } from './scheduler.js';

/** Prefill (ms, at each instance's predicted rate) of the requests waiting ahead for that instance. */
export type HoldView = (instance: string, dpRank: number) => number;

/** A request with nothing waiting ahead of it. */
export const NOTHING_HELD: HoldView = () => 0;

/** The busy instance a waiting request is expected to go to, and the prefill it will add there. */
export interface HoldTarget {
  instance: string;
  dpRank: number;
  prefillMs: number;
}

/** One try of a waiter: it went (decided and booked), or it waits (for `target`, when known). */
export type HoldTry =
  | { go: true }
  | {
      hold: HoldTarget | null;
      /** Some candidate was under its busy thresholds: waiters behind may still find room. */
      anyFree: boolean;
    };

/** A decision that chose nothing, as the queue keeps it: whom it waits for, and whether anything had room. */
export function waitOn(d: Decision): { hold: HoldTarget | null; anyFree: boolean } {
  const h = d.held;
  let anyFree = false;
  for (const c of d.candidates) if (!c.busy) anyFree = true;
  return { hold: h ? { instance: h.instance, dpRank: h.dpRank, prefillMs: h.prefillMs } : null, anyFree };
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
 * the candidates under their thresholds), or null. A busy candidate holding more of the prompt
 * than `free` is: its prefix saving (as the load bound measures it) must exceed the wait it costs,
 * its queue beyond `free`'s plus the prefill already waiting for it at the router ahead of this
 * request. (A holder of a shared prefix is the loaded one: dropping it recomputes the prefix cold.)
 * The largest margin wins.
 */
export function holderWorthWaiting(
  busy: readonly CandidateScore[],
  free: CandidateScore,
  ahead: HoldView,
): CandidateScore | null {
  let best: CandidateScore | null = null;
  let bestMargin = 0;
  for (const h of busy) {
    if (h.creditedBlocks <= free.creditedBlocks) continue;
    const waitMs = Math.max(0, h.queueMs - free.queueMs) + ahead(h.instance, h.dpRank);
    const margin = prefixSavingMs(h, free.prefillMs, free) - waitMs;
    if (margin > bestMargin) {
      bestMargin = margin;
      best = h;
    }
  }
  return best;
}

/** Every candidate busy: the one the request is likeliest to go to (the earliest predicted first token, the waits ahead included). */
export function likeliestHolder(busy: readonly CandidateScore[], ahead: HoldView): CandidateScore | null {
  let best: CandidateScore | null = null;
  let bestMs = Infinity;
  for (const h of busy) {
    const ms = h.queueMs + h.prefillMs + ahead(h.instance, h.dpRank);
    if (ms < bestMs) {
      bestMs = ms;
      best = h;
    }
  }
  return best;
}

interface Waiter<W> {
  w: W;
  /** Requests of one pool (model) share capacity: FIFO per pool. */
  pool: string;
  target: HoldTarget | null;
}

const key = (instance: string, dpRank: number) => `${instance}\u0000${dpRank}`;

/**
 * Requests waiting for capacity, oldest first, bounded. A request of a pool with waiters joins the
 * tail (a new arrival does not overtake them for freed room); `pass` tries the waiters in order,
 * each seeing what waits ahead of it, and those that went leave. Nothing here books: `tryOne` does,
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
  add(w: W, pool: string, target: HoldTarget | null): boolean {
    if (this.waiters.length >= this.maxSize) return false;
    this.waiters.push({ w, pool, target });
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

  /** What waits ahead of every waiter (a request about to join the tail sees this). */
  ahead(): HoldView {
    const held = new Map<string, number>();
    for (const x of this.waiters) addHeld(held, x.target);
    return viewOf(held);
  }

  /**
   * Try each waiter in arrival order. A waiter that finds no candidate under its thresholds ends
   * the pass for its pool (no one behind it can go either); the waiters it skips still count as
   * waiting ahead. Returns the waiters that went, in order.
   */
  pass(tryOne: (w: W, ahead: HoldView) => HoldTry): W[] {
    const held = new Map<string, number>();
    const view = viewOf(held);
    let full: Set<string> | null = null;
    const went: W[] = [];
    for (let i = 0; i < this.waiters.length; ) {
      const x = this.waiters[i];
      if (full?.has(x.pool)) {
        addHeld(held, x.target);
        i++;
        continue;
      }
      const t = tryOne(x.w, view);
      if ('go' in t) {
        // (tryOne may not touch the queue: the index still points at the next waiter.)
        this.waiters.splice(i, 1);
        went.push(x.w);
        continue;
      }
      x.target = t.hold;
      addHeld(held, x.target);
      if (!t.anyFree) (full ??= new Set()).add(x.pool);
      i++;
    }
    return went;
  }
}

function addHeld(held: Map<string, number>, t: HoldTarget | null): void {
  if (t === null) return;
  const k = key(t.instance, t.dpRank);
  held.set(k, (held.get(k) ?? 0) + t.prefillMs);
}

function viewOf(held: Map<string, number>): HoldView {
  return (instance, dpRank) => (held.size === 0 ? 0 : (held.get(key(instance, dpRank)) ?? 0));
}
