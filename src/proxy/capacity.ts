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

  /**
   * One turn of a request's wait for capacity (the proxy's and the gateway picker's), bounded by
   * its deadline and at most a second long: 'again' to decide again, 'aborted' when the signal
   * fired, 'gave_up' when the queue is full or the deadline has passed.
   */
  async turn(deadline: number, now: () => number, signal: AbortSignal): Promise<'again' | 'aborted' | 'gave_up'> {
    const waited = await this.wait(Math.min(deadline - now(), 1000), signal);
    if (signal.aborted) return 'aborted';
    return waited === 'full' || (waited === 'timeout' && now() >= deadline) ? 'gave_up' : 'again';
  }

  /** Wake up to `n` waiters (oldest first). */
  notify(n = Infinity): void {
    const woken = this.waiters.splice(0, Math.min(n, this.waiters.length));
    for (const w of woken) w();
  }
}
