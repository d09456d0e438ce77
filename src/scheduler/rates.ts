// Each worker's prefill speed, learned online from what the router sees: for every booking, the
// prefill work ahead of it plus its own uncached tokens (x1), the requests decoding there when it
// was booked (x2: every pass that prefills it also runs their decode step), and its time to first
// token (y). A decayed least-squares fit of y = overheadMs + msPerToken x1 + msPerDecoding x2,
// pulled toward the configured prior (ridge): with no or uninformative data the prior stands, and
// one odd sample cannot swing it. Pure: callers pass every observation; no clocks.
import { WorkerMap } from '../common/worker-map.js';
import type { PrefillRate } from './cost.js';

/** One booking's first-token observation: PrefillRates.observe's arguments beyond the worker. */
export interface RateSample {
  workTokens: number;
  decoding: number;
  ttftMs: number;
  pool: string;
}

const finiteNonNegative = (x: number): boolean => Number.isFinite(x) && x >= 0;

/** A sample PrefillRates learns from: finite, non-negative work, decoding count and TTFT. */
export function validSample(s: Pick<RateSample, 'workTokens' | 'decoding' | 'ttftMs'>): boolean {
  return finiteNonNegative(s.workTokens) && finiteNonNegative(s.decoding) && finiteNonNegative(s.ttftMs);
}

export interface RatePrior {
  /** Prefill tokens per second assumed before data. */
  tokensPerS: number;
  /** Fixed time per request (network, scheduling, first decode step) assumed before data. */
  overheadMs: number;
}

/** Weight of the prior slope, in tokens^2: worth 5 samples spread 2,000 tokens around their mean. */
const PRIOR_STRENGTH = 5 * 2000 * 2000;
/** Weight of the prior per-decoding-request time (0), in requests^2: 5 samples spread over 4 requests. */
const DECODE_PRIOR_STRENGTH = 5 * 4 * 4;
/** Each observation keeps this share of the older ones' weight (an effective window of ~200). */
const DECAY = 0.995;
/** A learned rate stays within this factor of the prior (a burst of timeouts is not a slow GPU). */
const BOUND = 20;
/** Most a decoding request may add to a first token (ms): far beyond any real decode step. */
const MAX_DECODE_MS = 100;

class Fit {
  n = 0;
  s1 = 0;
  s2 = 0;
  sy = 0;
  s11 = 0;
  s12 = 0;
  s22 = 0;
  s1y = 0;
  s2y = 0;
  samples = 0;

  add(x1: number, x2: number, y: number): void {
    const d = DECAY;
    this.n = this.n * d + 1;
    this.s1 = this.s1 * d + x1;
    this.s2 = this.s2 * d + x2;
    this.sy = this.sy * d + y;
    this.s11 = this.s11 * d + x1 * x1;
    this.s12 = this.s12 * d + x1 * x2;
    this.s22 = this.s22 * d + x2 * x2;
    this.s1y = this.s1y * d + x1 * y;
    this.s2y = this.s2y * d + x2 * y;
    this.samples++;
  }

  /** The fit, ridge-shrunk toward `prior` with `strength` x the default prior weights. */
  rate(prior: PrefillRate, strength = 1): PrefillRate {
    if (this.n < 1) return prior;
    const ps = PRIOR_STRENGTH * strength;
    const ds = DECODE_PRIOR_STRENGTH * strength;
    const n = this.n;
    const m1 = this.s1 / n;
    const m2 = this.s2 / n;
    const my = this.sy / n;
    // Centered (co)variances, ridge toward the prior slopes.
    const v11 = Math.max(0, this.s11 - n * m1 * m1) + ps;
    const v22 = Math.max(0, this.s22 - n * m2 * m2) + ds;
    const v12 = this.s12 - n * m1 * m2;
    const r1 = this.s1y - n * m1 * my + ps * prior.msPerToken;
    const r2 = this.s2y - n * m2 * my + ds * prior.msPerDecoding;
    const solved = solve2(v11, v12, v22, r1, r2);
    const clampB = (b: number) => Math.min(prior.msPerToken * BOUND, Math.max(prior.msPerToken / BOUND, b));
    const clampC = (c: number) => Math.min(MAX_DECODE_MS, Math.max(0, c));
    let msPerToken = clampB(solved[0]);
    let msPerDecoding = clampC(solved[1]);
    // The intercept shrinks toward the prior with few samples, as the slopes do.
    const k = n / (n + 5 * strength);
    let overheadMs = k * (my - msPerToken * m1 - msPerDecoding * m2) + (1 - k) * prior.overheadMs;
    if (overheadMs < 0) {
      // No fixed cost fits: the plane goes through the origin (ridge toward the prior slopes).
      overheadMs = 0;
      const o = solve2(
        this.s11 + ps,
        this.s12,
        this.s22 + ds,
        this.s1y + ps * prior.msPerToken,
        this.s2y + ds * prior.msPerDecoding,
      );
      msPerToken = clampB(o[0]);
      msPerDecoding = clampC(o[1]);
    }
    return { msPerToken, overheadMs, msPerDecoding };
  }
}

/** [a b; b c] x = [r1; r2] (positive definite here: the ridge terms keep the diagonal dominant enough). */
function solve2(a: number, b: number, c: number, r1: number, r2: number): [number, number] {
  const det = a * c - b * b;
  if (!(Math.abs(det) > 1e-12)) return [r1 / a, r2 / c];
  return [(r1 * c - b * r2) / det, (a * r2 - b * r1) / det];
}

export interface RateSnapshot {
  instance: string;
  dpRank: number;
  samples: number;
  tokensPerS: number;
  overheadMs: number;
  msPerDecoding: number;
}

export const DEFAULT_RATE_PRIOR: RatePrior = { tokensPerS: 20_000, overheadMs: 20 };

/**
 * How much more a worker's fit is pulled toward its pool's than a pool's toward the configured
 * prior: a model's workers share hardware and model, so a worker's own samples must show a real
 * difference before it is priced apart. The pool's fit holds the worker's samples too; with equal
 * pulls a warm worker counted them twice and looked faster than a cold peer of the same speed
 * (measured: 20-40 % early in a run), so a greedy cost never warmed the cold one.
 */
const PEER_STRENGTH = 8;

/**
 * Per worker fits, shrunk toward their pool's fit (the model's workers share hardware and model,
 * so a worker the router has not used yet starts from what its peers showed, not from the
 * configured guess: an idle instance is not mistaken for a slow one), itself shrunk toward the prior.
 */
export class PrefillRates {
  private readonly fits = new WorkerMap<{ instance: string; dpRank: number; pool: string; fit: Fit }>();
  private readonly pools = new Map<string, Fit>();

  /**
   * A booking's first token: `workTokens` = prefill booked ahead of it + its own, `decoding` =
   * requests decoding on the worker when it was booked, `ttftMs` as seen; `pool` = its model.
   */
  observe(instance: string, dpRank: number, workTokens: number, decoding: number, ttftMs: number, pool = ''): void {
    if (!validSample({ workTokens, decoding, ttftMs })) return;
    let f = this.fits.get(instance, dpRank);
    if (!f) this.fits.set(instance, dpRank, (f = { instance, dpRank, pool, fit: new Fit() }));
    f.pool = pool;
    f.fit.add(workTokens, decoding, ttftMs);
    let p = this.pools.get(pool);
    if (!p) this.pools.set(pool, (p = new Fit()));
    p.add(workTokens, decoding, ttftMs);
  }

  /** The pool's rate (the prior until it has data): what its workers shrink toward. */
  poolRate(prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    const p = toRate(prior);
    const pf = this.pools.get(pool);
    // The ridge alone decides how far a few samples move it off the prior (no sample gate: with
    // one, a cold instance sat at the configured guess while its peers had learned).
    return pf ? pf.rate(p) : p;
  }

  /** A worker's learned rate, shrunk toward `base` (its pool's rate). A few flops: no cache needed. */
  workerRate(instance: string, dpRank: number, base: PrefillRate): PrefillRate {
    const f = this.fits.get(instance, dpRank);
    return f ? f.fit.rate(base, PEER_STRENGTH) : base;
  }

  /** The worker's learned rate (its pool's, or the prior, until it has data). */
  rate(instance: string, dpRank: number, prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    return this.workerRate(instance, dpRank, this.poolRate(prior, pool));
  }

  /** Forget an instance (removed from the pool). */
  drop(instance: string): void {
    this.fits.deleteInstance(instance);
  }

  snapshot(prior: RatePrior = DEFAULT_RATE_PRIOR): RateSnapshot[] {
    return [...this.fits.values()].map((f) => {
      const r = this.rate(f.instance, f.dpRank, prior, f.pool);
      return {
        instance: f.instance,
        dpRank: f.dpRank,
        samples: f.fit.samples,
        tokensPerS: 1000 / r.msPerToken,
        overheadMs: r.overheadMs,
        msPerDecoding: r.msPerDecoding,
      };
    });
  }
}

function toRate(p: RatePrior): PrefillRate {
  return { msPerToken: 1000 / Math.max(1, p.tokensPerS), overheadMs: Math.max(0, p.overheadMs), msPerDecoding: 0 };
}
