// A bounded FIFO of requests waiting for an eligible instance (all busy, or all down during a
// rolling restart). Waiters are woken whenever capacity may have changed; each then re-decides.
export class CapacityQueue {
  private readonly waiters: Array<() => void> = [];

  constructor(private maxSize: number) {}

  setMaxSize(n: number): void {
    this.maxSize = n;
  }

  get depth(): number {
    return this.waiters.length;
  }

  /**
   * Wait until notified or `timeoutMs` passes (or the signal aborts). 'full' at once when the queue
   * holds maxSize waiters already.
   */
  wait(timeoutMs: number, signal?: AbortSignal): Promise<'woken' | 'timeout' | 'full'> {
    if (this.waiters.length >= this.maxSize) return Promise.resolve('full');
    if (timeoutMs <= 0 || signal?.aborted) return Promise.resolve('timeout');
    return new Promise((resolve) => {
      let done = false;
      const finish = (woken: boolean) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const i = this.waiters.indexOf(wake);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(woken ? 'woken' : 'timeout');
      };
      const wake = () => finish(true);
      const onAbort = () => finish(false);
      const timer = setTimeout(() => finish(false), timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(wake);
    });
  }

  /** Wake up to `n` waiters (oldest first). */
  notify(n = Infinity): void {
    const woken = this.waiters.splice(0, Math.min(n, this.waiters.length));
    for (const w of woken) w();
  }
}

/** One try of a decision: `done` (act on it: chosen, or refused for good), or `wait` for capacity. */
export type CapacityTry<T, W> = { done: T } | { wait: W };

/** How the wait ended: decided, gave up (queue full or deadline passed; the last try), or aborted. */
export type CapacityWait<T, W> = { done: T } | { gaveUp: W } | { aborted: true };

/**
 * "Wait for capacity, decide again", the proxy's and the gateway picker's: `decide` until it is
 * done, waiting on `queue` between tries (each wait at most a second, so a missed wake-up costs
 * one second, not the whole bound), until `deadline` (ms on `now`'s clock) or the signal aborts.
 */
export async function decideWithinCapacity<T, W>(
  queue: CapacityQueue,
  bound: { deadline: number; now: () => number; signal: AbortSignal },
  decide: () => CapacityTry<T, W>,
): Promise<CapacityWait<T, W>> {
  const { deadline, now, signal } = bound;
  for (;;) {
    const t = decide();
    if ('done' in t) return t;
    const waited = await queue.wait(Math.min(deadline - now(), 1000), signal);
    if (signal.aborted) return { aborted: true };
    if (waited === 'full' || (waited === 'timeout' && now() >= deadline)) return { gaveUp: t.wait };
  }
}
