// Each worker's prefill speed, learned online from what the router sees: for every booking, the
// prefill work ahead of it plus its own uncached tokens (x), and its time to first token (y).
// A decayed least-squares fit of y = overheadMs + msPerToken x, pulled toward the configured prior
// (ridge): with no or uninformative data the prior stands, and one odd sample cannot swing it.
// Pure: callers pass every observation; no clocks.
import type { PrefillRate } from './cost.js';

export interface RatePrior {
  /** Prefill tokens per second assumed before data. */
  tokensPerS: number;
  /** Fixed time per request (network, scheduling, first decode step) assumed before data. */
  overheadMs: number;
}

/** Weight of the prior slope, in tokens^2: worth 5 samples spread 2,000 tokens around their mean. */
const PRIOR_STRENGTH = 5 * 2000 * 2000;
/** Each observation keeps this share of the older ones' weight (an effective window of ~200). */
const DECAY = 0.995;
/** A learned rate stays within this factor of the prior (a burst of timeouts is not a slow GPU). */
const BOUND = 20;

class Fit {
  n = 0;
  sx = 0;
  sy = 0;
  sxx = 0;
  sxy = 0;
  samples = 0;

  add(x: number, y: number): void {
    this.n = this.n * DECAY + 1;
    this.sx = this.sx * DECAY + x;
    this.sy = this.sy * DECAY + y;
    this.sxx = this.sxx * DECAY + x * x;
    this.sxy = this.sxy * DECAY + x * y;
    this.samples++;
  }

  rate(prior: PrefillRate): PrefillRate {
    if (this.n < 1) return prior;
    const mx = this.sx / this.n;
    const my = this.sy / this.n;
    const vxx = this.sxx - this.n * mx * mx;
    const vxy = this.sxy - this.n * mx * my;
    const clamp = (b: number) => Math.min(prior.msPerToken * BOUND, Math.max(prior.msPerToken / BOUND, b));
    let msPerToken = clamp((vxy + PRIOR_STRENGTH * prior.msPerToken) / (Math.max(0, vxx) + PRIOR_STRENGTH));
    // The intercept shrinks toward the prior with few samples, as the slope does.
    const k = this.n / (this.n + 5);
    let overheadMs = k * (my - msPerToken * mx) + (1 - k) * prior.overheadMs;
    if (overheadMs < 0) {
      // No fixed cost fits: the line goes through the origin (ridge toward the prior slope).
      overheadMs = 0;
      msPerToken = clamp((this.sxy + PRIOR_STRENGTH * prior.msPerToken) / (this.sxx + PRIOR_STRENGTH));
    }
    return { msPerToken, overheadMs };
  }
}

export interface RateSnapshot {
  instance: string;
  dpRank: number;
  samples: number;
  tokensPerS: number;
  overheadMs: number;
}

export const DEFAULT_RATE_PRIOR: RatePrior = { tokensPerS: 20_000, overheadMs: 20 };

export class PrefillRates {
  private readonly fits = new Map<string, { instance: string; dpRank: number; fit: Fit }>();

  /** A booking's first token: `workTokens` = prefill booked ahead of it + its own, `ttftMs` as seen. */
  observe(instance: string, dpRank: number, workTokens: number, ttftMs: number): void {
    if (!(workTokens >= 0) || !Number.isFinite(workTokens) || !(ttftMs >= 0) || !Number.isFinite(ttftMs)) return;
    const k = `${instance}\u0000${dpRank}`;
    let f = this.fits.get(k);
    if (!f) this.fits.set(k, (f = { instance, dpRank, fit: new Fit() }));
    f.fit.add(workTokens, ttftMs);
  }

  /** The worker's learned rate (the prior until it has data). A few flops: no cache needed. */
  rate(instance: string, dpRank: number, prior: RatePrior = DEFAULT_RATE_PRIOR): PrefillRate {
    const p = toRate(prior);
    const f = this.fits.get(`${instance}\u0000${dpRank}`);
    return f ? f.fit.rate(p) : p;
  }

  /** Forget an instance (removed from the pool). */
  drop(instance: string): void {
    for (const [k, f] of this.fits) if (f.instance === instance) this.fits.delete(k);
  }

  snapshot(prior: RatePrior = DEFAULT_RATE_PRIOR): RateSnapshot[] {
    return [...this.fits.values()].map((f) => {
      const r = this.rate(f.instance, f.dpRank, prior);
      return { instance: f.instance, dpRank: f.dpRank, samples: f.fit.samples, tokensPerS: 1000 / r.msPerToken, overheadMs: r.overheadMs };
    });
  }
}

function toRate(p: RatePrior): PrefillRate {
  return { msPerToken: 1000 / Math.max(1, p.tokensPerS), overheadMs: Math.max(0, p.overheadMs) };
}
