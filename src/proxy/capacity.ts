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
