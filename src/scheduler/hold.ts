// Holding a request at the router while instances are busy (routing.busy): which busy instance a
// request is worth waiting for, and the queue of waiters, in arrival order. Pure: the server's
// CapacityQueue (src/proxy/capacity.ts) adds timers and promises, the fleet simulator virtual-time
// events; both drive this one queue and the scheduler's one judgement.
import type { CandidateScore, Decision } from './scheduler.js';

/** The busy candidate a waiter is held for (a decision `held`): an instance's dp rank. */
export interface HeldFor {
  instance: string;
  dpRank: number;
}

/** One try of a waiter: it went (decided and booked), or it waits. */
export type HoldTry =
  | { go: true }
  | {
      /** Some candidate was under its busy thresholds: waiters behind may still find room. */
      anyFree: boolean;
      /** The busy candidate it waits for (a decision `held`), or null/absent: any instance that frees room. */
      holder?: HeldFor | null;
    };

/** A decision that chose nothing, as the queue sees it: whether any candidate had room, and the holder it is held for. */
export function waitOn(d: Decision): { anyFree: boolean; holder: HeldFor | null } {
  const holder = d.held ? { instance: d.held.instance, dpRank: d.held.dpRank } : null;
  for (const c of d.candidates) if (!c.busy) return { anyFree: true, holder };
  return { anyFree: false, holder };
}

/**
 * What the pick's cached prefix saves, in ms, against prefilling `elsewhereMs` on `alt`, whose queue
 * beyond the pick's is waited for too. The load bound (pickers.ts) and the hold judge by it.
 */
export function prefixSavingMs(pick: CandidateScore, elsewhereMs: number, alt: CandidateScore): number {
  return prefixSaving(pick.queueMs, pick.prefillMs, elsewhereMs, alt.queueMs);
}

/** prefixSavingMs of the pick's and the alternative's terms (the pick's columns, PickLoads). */
export function prefixSaving(
  pickQueueMs: number,
  pickPrefillMs: number,
  elsewhereMs: number,
  altQueueMs: number,
): number {
  return elsewhereMs + Math.max(0, altQueueMs - pickQueueMs) - pickPrefillMs;
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
  /** Arrival number (the budget's cursor names a place in the queue by it). */
  seq: number;
  /** The busy candidate its last try was held for; null: it waits for any instance (all busy, or not tried yet). */
  holder: HeldFor | null;
  /** To be tried again whatever the wake-up (its own timer, a change no instance is named for, a pass cut by the budget). */
  due: boolean;
  /** Went in the running pass (left at its end). */
  gone: boolean;
}

/** Per pass, the due waiters tried that stay (those that go are not counted: each books and leaves). */
export const WAKE_BUDGET = 32;

/**
 * Requests waiting for capacity, oldest first, bounded. A request of a pool with waiters joins the
 * tail (a new arrival does not overtake them for freed room). Nothing here books: `tryOne` does,
 * before the next waiter is tried, so each sees the load the ones before it added.
 *
 * A wake-up does not decide every waiter again (with 1,024 held for a busy holder while another
 * instance is free, every first token and finish did). Each waiter is indexed by what it waits for:
 * - any instance (all busy, nothing tried yet): tried on every wake-up, in arrival order, until the
 *   first of its pool that still finds nothing free (none behind it can go either);
 * - a busy holder of its prefix (`held`): tried when that instance frees room (`pass(.., instance)`),
 *   its waiters in arrival order, until the first still held for it (per dp rank): it is still busy, and
 *   its load only fell, which makes it the more worth waiting for (a larger margin in
 *   holderWorthWaiting), so every waiter held for it, of any pool, would stay;
 * - `due` (its own timer, `dueAll` for a change no instance is named for, a pass cut short): tried
 *   whatever the wake-up, at most `budget` of them staying per pass; the next pass goes on from the
 *   first not reached (the cursor), around the queue, so no waiter starves behind ones that stay.
 * A held waiter is not decided again when another instance frees room, though a free instance's
 * shorter queue may tip its judgement there (a cold prefill): its own timer, within a second, does.
 * (At llm-d's shape, 128 requests/s, deciding them on every wake-up sent more of them cold.)
 */
export class HoldQueue<W> {
  private waiters: Waiter<W>[] = [];
  private seq = 0;
  /** Arrival number where the due tries go on (0: from the head). */
  private cursor = 0;

  constructor(
    public maxSize: number,
    readonly budget = WAKE_BUDGET,
  ) {}

  get depth(): number {
    return this.waiters.length;
  }

  /** Whether a request of `pool` must queue behind others. */
  waitingIn(pool: string): boolean {
    for (const x of this.waiters) if (x.pool === pool) return true;
    return false;
  }

  /** Join at the tail (`holder`: the busy instance its try before it joined was held for); false when the queue is full. */
  add(w: W, pool: string, holder: HeldFor | null = null): boolean {
    if (this.waiters.length >= this.maxSize) return false;
    this.waiters.push({ w, pool, seq: ++this.seq, holder, due: false, gone: false });
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

  /** `w` is tried on the next pass, whatever it waits for (its own timer); false if not queued. */
  due(w: W): boolean {
    const x = this.waiters.find((y) => y.w === w);
    if (x) x.due = true;
    return x !== undefined;
  }

  /** Every waiter is tried again (within the budget, pass after pass): a change no instance is named for. */
  dueAll(): void {
    for (const x of this.waiters) x.due = true;
  }

  /** The instance each waiter waits for, oldest first (null: any). */
  holders(): (string | null)[] {
    return this.waiters.map((x) => x.holder?.instance ?? null);
  }

  /**
   * A wake-up: `freed` is the instance whose room grew (a first token, a finished request), or null.
   * Tries, in arrival order, the waiters for any instance and those held for `freed`, then the due
   * ones from the cursor within the budget. Returns the waiters that went, in the order they went.
   */
  pass(tryOne: (w: W) => HoldTry, freed: string | null = null): W[] {
    const went: W[] = [];
    /** Pools where a waiter found nothing free: no one of them can go in this pass. */
    const full = new Set<string>();
    /** The dp ranks of `freed` still busy: a waiter for one was tried and is still held for it. */
    let stillBusy: Set<number> | null = null;
    const tried = new Set<Waiter<W>>();
    const attempt = (x: Waiter<W>): HoldTry => {
      tried.add(x);
      x.due = false;
      const t = tryOne(x.w);
      if ('go' in t) {
        x.gone = true;
        went.push(x.w);
        return t;
      }
      x.holder = t.holder ?? null;
      if (!t.anyFree) full.add(x.pool);
      return t;
    };
    // (tryOne may not touch the queue: the waiters that went leave at the end.)
    for (const x of this.waiters) {
      if (full.has(x.pool)) continue;
      if (x.holder === null) attempt(x);
      else if (freed !== null && x.holder.instance === freed && !stillBusy?.has(x.holder.dpRank)) {
        const was = x.holder.dpRank;
        const t = attempt(x);
        if (!('go' in t) && x.holder?.instance === freed && x.holder.dpRank === was) (stillBusy ??= new Set()).add(was);
      }
    }
    this.dueFromCursor(attempt, tried, full);
    if (went.length > 0) this.waiters = this.waiters.filter((x) => !x.gone);
    return went;
  }

  /** The due waiters, from the cursor around the queue, until `budget` of them stay. */
  private dueFromCursor(
    attempt: (x: Waiter<W>) => HoldTry,
    tried: ReadonlySet<Waiter<W>>,
    full: ReadonlySet<string>,
  ): void {
    const n = this.waiters.length;
    let start = this.waiters.findIndex((x) => x.seq >= this.cursor);
    if (start < 0) start = 0;
    let stayed = 0;
    this.cursor = 0;
    for (let k = 0; k < n; k++) {
      const x = this.waiters[(start + k) % n];
      if (!x.due || x.gone || tried.has(x)) continue;
      // Nothing of its pool is free: it could only wait (its own timer tries it again).
      if (full.has(x.pool)) {
        x.due = false;
        continue;
      }
      if (stayed >= this.budget) {
        this.cursor = x.seq;
        return;
      }
      if (!('go' in attempt(x))) stayed++;
    }
  }
}
