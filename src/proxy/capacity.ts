// The router's capacity queue: requests waiting for an eligible instance (all busy, a busy holder
// of their prefix worth waiting for, or all down during a rolling restart). The order and the
// judgement are the pure HoldQueue's and the scheduler's (src/scheduler/hold.ts, which the fleet
// simulator drives too); this adds the promises, the timers and the client's abort.
import { type HeldFor, HoldQueue, type HoldTry } from '../scheduler/hold.js';

/** One try of a decision: `done` (act on it: chosen and booked, or refused for good), or `wait` for capacity. */
export type CapacityTry<T, W> =
  | { done: T }
  | {
      wait: W;
      /** Some candidate had room (false: no waiter behind it can go either; absent: false). */
      anyFree?: boolean;
      /** The busy candidate it is held for (tried again when its instance frees room); absent: any. */
      holder?: HeldFor | null;
    };

/** How the wait ended: decided, gave up (deadline passed, or the queue was full: the last try), full before any try, or aborted. */
export type CapacityWait<T, W> = { done: T } | { gaveUp: W } | { full: true } | { aborted: true };

const GONE: HoldTry = { go: true };

/** A waiter: its own try (which ends its wait when it goes). */
export interface Waiting {
  /** `mayHold`: it may keep waiting for a busy holder of its prefix (false: a last try). */
  tryOne(mayHold: boolean): HoldTry;
}

const tryWaiting = (w: Waiting): HoldTry => w.tryOne(true);

/**
 * A request's pool in the capacity queue: the requests with the same candidates (a model's
 * instances, those serving one of its adapters, a gateway's subset of them). A waiter that finds
 * none of its candidates under their thresholds ends a pass for its pool only (HoldQueue.pass): a
 * pool keyed by the model alone let an adapter request waiting for its busy instances hold back the
 * model's requests that another instance could serve.
 */
export function capacityPool(model: string, adapter: string | null, subset: ReadonlySet<string> | null = null): string {
  const pool = adapter === null ? model : `${model}\u0000${adapter}`;
  return subset === null ? pool : `${pool}\u0000${[...subset].sort().join('\u0000')}`;
}

/**
 * A bounded queue of requests waiting for capacity, FIFO per model pool: a request of a pool with
 * waiters joins their tail; each wake-up (`notify`: a first token, a finished request, an instance
 * back) tries the waiters it may let go in arrival order, each booking before the next is tried
 * (HoldQueue.pass: those waiting for any instance, those held for the instance that freed room,
 * and a budget of the due ones).
 */
export class CapacityQueue {
  /** The pure queue decideWithinCapacity drives. */
  readonly holds: HoldQueue<Waiting>;

  constructor(maxSize: number) {
    this.holds = new HoldQueue(maxSize);
  }

  setMaxSize(n: number): void {
    this.holds.maxSize = n;
  }

  get depth(): number {
    return this.holds.depth;
  }

  /**
   * Capacity may have changed: `instance`'s room grew (a first token, a finished or moved request),
   * or, without one, something no instance is named for (an instance back, a reload, stale or a
   * replica's bookings freed): every waiter is due again.
   */
  notify(instance?: string): void {
    if (this.holds.depth === 0) return;
    if (instance === undefined) this.holds.dueAll();
    this.holds.pass(tryWaiting, instance ?? null);
  }

  /** A waiter's own wake-up (its timer, its first turn behind others): it is tried whatever it waits for. */
  wake(w: Waiting): void {
    if (this.holds.due(w)) this.holds.pass(tryWaiting);
  }
}

/**
 * "Wait for capacity, decide again", the proxy's and the gateway picker's. `decide` books when it
 * chooses (the next waiter tried sees the load). With no waiter of `pool` ahead it decides at once;
 * else (or when it must wait) it queues and is tried in turn on each notify, and at most a second
 * after its last try (a missed wake-up costs a second, not the whole bound), until `deadline` (ms
 * on `now`'s clock) or the signal aborts. Leaving the queue never leaves a booking behind: a try
 * that booked ended the wait.
 */
export async function decideWithinCapacity<T, W>(
  queue: CapacityQueue,
  bound: { deadline: number; now: () => number; signal: AbortSignal },
  decide: (mayHold: boolean) => CapacityTry<T, W>,
  pool: string | (() => string) = '',
): Promise<CapacityWait<T, W>> {
  const { deadline, now, signal } = bound;
  const q = queue.holds;
  // The pool's name only when someone waits or this request must (a subset's name sorts its instances).
  let name = typeof pool === 'string' ? pool : null;
  const named = () => (name ??= (pool as () => string)());
  let first: CapacityTry<T, W> | null = null;
  if (q.depth === 0 || !q.waitingIn(named())) {
    // Only a request that can queue may wait for a busy holder (queue off or full: the free pick now).
    first = decide(q.depth < q.maxSize && now() < deadline);
    if ('done' in first) return first;
  }
  if (signal.aborted) return { aborted: true };
  return new Promise((resolve, reject) => {
    let last: CapacityTry<T, W> | null = first;
    let timer: NodeJS.Timeout | undefined;
    let over = false;
    const settle = () => {
      over = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    };
    const end = (r: CapacityWait<T, W>) => {
      settle();
      q.remove(me);
      resolve(r);
    };
    const giveUp = () => end(last === null || 'done' in last ? { full: true } : { gaveUp: last.wait });
    const me: Waiting = {
      tryOne(mayHold) {
        let t: CapacityTry<T, W>;
        try {
          t = decide(mayHold);
        } catch (err) {
          // A try that refuses the request for good (the caller's error) ends its wait alone.
          settle();
          reject(err);
          return GONE;
        }
        last = t;
        if ('done' in t) {
          // The pass removes it from the queue.
          settle();
          resolve(t);
          return GONE;
        }
        return { anyFree: t.anyFree ?? false, holder: t.holder ?? null };
      },
    };
    const onAbort = () => end({ aborted: true });
    const arm = () => {
      timer = setTimeout(
        () => {
          queue.wake(me);
          if (over) return;
          if (now() < deadline) return arm();
          // Its time is up: a last try that takes a free candidate rather than wait for a holder.
          if ('go' in me.tryOne(false)) q.remove(me);
          else giveUp();
        },
        Math.max(0, Math.min(deadline - now(), 1000)),
      );
    };
    if (
      !q.add(me, named(), first !== null && !('done' in first) ? (first.holder ?? null) : null) ||
      (first !== null && now() >= deadline)
    ) {
      q.remove(me);
      resolve(first === null || 'done' in first ? { full: true } : { gaveUp: first.wait });
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    arm();
    // A newcomer behind waiters: its first try is its turn in order.
    if (first === null) queue.wake(me);
  });
}
