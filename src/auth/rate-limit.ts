// Token bucket (pure: the caller passes `now` in ms).
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly ratePerSec: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  /**
   * Requests admitted elsewhere (another replica of the router) use this bucket too. The debt may
   * go below zero, down to one burst, so the whole router's rate converges on the limit.
   */
  charge(n: number, now: number): void {
    this.refill(now);
    this.tokens = Math.max(-this.burst, this.tokens - n);
  }

  private refill(now: number): void {
    const elapsed = Math.max(0, now - this.last) / 1000;
    this.last = now;
    this.tokens = Math.min(this.burst, this.tokens + elapsed * this.ratePerSec);
  }

  /** Take one token; returns 0 when granted, else the ms to wait before one is available. */
  take(now: number): number {
    this.refill(now);
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - this.tokens) / this.ratePerSec) * 1000);
  }
}
