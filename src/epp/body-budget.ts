// The request-body bytes all of the picker's open streams hold while their bodies arrive, under one
// cap (epp.max_buffered_bytes): however many streams a client of the gRPC port opens, the bodies
// they hold stay under it. Pure: a counter; the cap is read per call (a reload applies at once).
export class BodyBudget {
  private held = 0;

  constructor(private readonly cap: () => number) {}

  /** The bytes held now. */
  get bytes(): number {
    return this.held;
  }

  /** Take `n` bytes; false (nothing taken) when that would pass the cap. */
  take(n: number): boolean {
    if (this.held + n > this.cap()) return false;
    this.held += n;
    return true;
  }

  /** Give back bytes taken before. */
  give(n: number): void {
    this.held = Math.max(0, this.held - n);
  }
}
