// Each worker's prefill speed, learned online from what the router sees: for every booking, the
// prefill work ahead of it plus its own uncached tokens (x1), the requests decoding there when it
// was booked (x2: every pass that prefills it also runs their decode step), the KV blocks in-flight
// requests held there with it (x3: a decode step reads all of them, so a fuller batch makes every
// pass longer), and its time to first token (y). A decayed least-squares fit of
// y = overheadMs + msPerToken x1 + msPerDecoding x2 + msPerBlock x3, pulled toward the configured
// prior (ridge): with no or uninformative data the prior stands, and one odd sample cannot swing it.
// Pure: callers pass every observation; no clocks.
import type { PrefillRate } from './cost.js';

export interface RatePrior {
  /** Prefill tokens per second assumed before data. */
  tokensPerS: number;
  /** Fixed time per request (network, scheduling, first decode step) assumed before data. */
  overheadMs: number;
}

/** One booking's first token, as the fit sees it. */
export interface RateSample {
  /** Prefill tokens booked ahead of it plus its own uncached tokens. */
  workTokens: number;
  /** Requests decoding on the worker when it was booked. */
  decoding: number;
  /** KV blocks held by in-flight requests on the worker once it was booked (its own included). */
  heldBlocks: number;
  ttftMs: number;
}

/**
 * Ridge weight of each slope's prior, in feature units^2 (worth 5 samples spread this far around
 * their mean): 2,000 tokens, 4 decoding requests, 500 blocks. The decode slopes' prior is 0.
 */
const PRIOR_STRENGTH = [5 * 2000 * 2000, 5 * 4 * 4, 5 * 500 * 500] as const;
/** Each observation keeps this share of the older ones' weight (an effective window of ~200). */
const DECAY = 0.995;
/** A learned rate stays within this factor of the prior (a burst of timeouts is not a slow GPU). */
const BOUND = 20;
/** Most a decoding request may add to a first token (ms): far beyond any real decode step. */
const MAX_DECODE_MS = 100;
/** Most a held block may add to a first token (ms): ~50x what a full GPU's decode step costs. */
const MAX_BLOCK_MS = 0.5;

const K = 3;

class Fit {
  n = 0;
  /** Decayed sums: s[i] = sum x_i, sy = sum y, sxx[i*K+j] = sum x_i x_j, sxy[i] = sum x_i y. */
  readonly s = new Float64Array(K);
  sy = 0;
  readonly sxx = new Float64Array(K * K);
  readonly sxy = new Float64Array(K);
  samples = 0;

  add(x: readonly number[], y: number): void {
    const d = DECAY;
    this.n = this.n * d + 1;
    this.sy = this.sy * d + y;
    for (let i = 0; i < K; i++) {
      this.s[i] = this.s[i] * d + x[i];
      this.sxy[i] = this.sxy[i] * d + x[i] * y;
      for (let j = 0; j < K; j++) this.sxx[i * K + j] = this.sxx[i * K + j] * d + x[i] * x[j];
    }
    this.samples++;
  }

  rate(prior: PrefillRate): PrefillRate {
    if (this.n < 1) return prior;
    const n = this.n;
    const my = this.sy / n;
    const m = Array.from(this.s, (v) => v / n);
    const p = [prior.msPerToken, prior.msPerDecoding, prior.msPerBlock];
    // Centered (co)variances, ridge toward the prior slopes.
    const a = new Float64Array(K * K);
    const r = new Float64Array(K);
    for (let i = 0; i < K; i++) {
      for (let j = 0; j < K; j++) a[i * K + j] = this.sxx[i * K + j] - n * m[i] * m[j];
      a[i * K + i] = Math.max(0, a[i * K + i]) + PRIOR_STRENGTH[i];
      r[i] = this.sxy[i] - n * m[i] * my + PRIOR_STRENGTH[i] * p[i];
    }
    let b = this.clamp(solve(a, r), prior);
    // The intercept shrinks toward the prior with few samples, as the slopes do.
    const k = n / (n + 5);
    let overheadMs = k * (my - b[0] * m[0] - b[1] * m[1] - b[2] * m[2]) + (1 - k) * prior.overheadMs;
    if (overheadMs < 0) {
      // No fixed cost fits: the prefill slope goes through the origin (ridge toward the prior), the
      // decode slopes stay as fitted (a constant batch must not stand in for the missing intercept).
      overheadMs = 0;
      const rest = this.sxy[0] - b[1] * this.sxx[1] - b[2] * this.sxx[2];
      b[0] = this.clamp([(rest + PRIOR_STRENGTH[0] * p[0]) / (this.sxx[0] + PRIOR_STRENGTH[0]), b[1], b[2]], prior)[0];
    }
    return { msPerToken: b[0], overheadMs, msPerDecoding: b[1], msPerBlock: b[2] };
  }

  private clamp(b: number[], prior: PrefillRate): number[] {
    return [
      Math.min(prior.msPerToken * BOUND, Math.max(prior.msPerToken / BOUND, b[0])),
      Math.min(MAX_DECODE_MS, Math.max(0, b[1])),
      Math.min(MAX_BLOCK_MS, Math.max(0, b[2])),
    ];
  }
}

/** Solve A x = r for a small symmetric positive definite A (the ridge terms keep it so): Gaussian elimination. */
function solve(a: Float64Array, r: Float64Array): number[] {
  const m = Array.from(a);
  const x = Array.from(r);
  for (let c = 0; c < K; c++) {
    const pivot = m[c * K + c];
    if (!(Math.abs(pivot) > 1e-12)) return Array.from(r, (v, i) => v / a[i * K + i]);
    for (let row = c + 1; row < K; row++) {
      const f = m[row * K + c] / pivot;
      for (let j = c; j < K; j++) m[row * K + j] -= f * m[c * K + j];
      x[row] -= f * x[c];
    }
  }
  for (let c = K - 1; c >= 0; c--) {
    let v = x[c];
    for (let j = c + 1; j < K; j++) v -= m[c * K + j] * x[j];
    x[c] = v / m[c * K + c];
  }
  return x;
}

export interface RateSnapshot {
  instance: string;
  dpRank: number;
  samples: number;
  tokensPerS: number;
  overheadMs: number;
  msPerDecoding: number;
  msPerBlock: number;
}

export const DEFAULT_RATE_PRIOR: RatePrior = { tokensPerS: 20_000, overheadMs: 20 };

/** Samples a pool needs before its fit replaces the configured prior of its workers. */
const POOL_MIN_SAMPLES = 20;

/**
 * Per worker fits, shrunk toward their pool's fit (the model's workers share hardware and model,
 * so a worker the router has not used yet starts from what its peers showed, not from the
 * configured guess: an idle instance is not mistaken for a slow one), itself shrunk toward the prior.
 */
export class PrefillRates {
  private readonly fits = new Map<string, { instance: string; dpRank: number; pool: string; fit: Fit }>();
  private readonly pools = new Map<string, Fit>();

  /** A booking's first token (see RateSample); `pool` = its model. Garbage is ignored. */
  observe(instance: string, dpRank: number, sample: RateSample, pool = ''): void {
    const { workTokens, decoding, heldBlocks, ttftMs } = sample;
    for (const v of [workTokens, decoding, heldBlocks, ttftMs]) if (!(v >= 0) || !Number.isFinite(v)) return;
    const x = [workTokens, decoding, heldBlocks];
    const k = `${instance}\u0000${dpRank}`;
    let f = this.fits.get(k);
    if (!f) this.fits.set(k, (f = { instance, dpRank, pool, fit: new Fit() }));
    f.pool = pool;
    f.fit.add(x, ttftMs);
    let p = this.pools.get(pool);
    if (!p) this.pools.set(pool, (p = new Fit()));
    p.add(x, ttftMs);
  }

  /** The pool's rate (the prior until the pool has enough samples): what its workers shrink toward. */
  poolRate(prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    const p = toRate(prior);
    const pf = this.pools.get(pool);
    return pf && pf.samples >= POOL_MIN_SAMPLES ? pf.rate(p) : p;
  }

  /** A worker's learned rate, shrunk toward `base` (its pool's rate). A few flops: no cache needed. */
  workerRate(instance: string, dpRank: number, base: PrefillRate): PrefillRate {
    const f = this.fits.get(`${instance}\u0000${dpRank}`);
    return f ? f.fit.rate(base) : base;
  }

  /** The worker's learned rate (its pool's, or the prior, until it has data). */
  rate(instance: string, dpRank: number, prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    return this.workerRate(instance, dpRank, this.poolRate(prior, pool));
  }

  /** Forget an instance (removed from the pool). */
  drop(instance: string): void {
    for (const [k, f] of this.fits) if (f.instance === instance) this.fits.delete(k);
  }

  snapshot(prior: RatePrior = DEFAULT_RATE_PRIOR): RateSnapshot[] {
    return [...this.fits.values()].map((f) => {
      const r = this.rate(f.instance, f.dpRank, prior, f.pool);
      return { instance: f.instance, dpRank: f.dpRank, samples: f.fit.samples, tokensPerS: 1000 / r.msPerToken, overheadMs: r.overheadMs, msPerDecoding: r.msPerDecoding, msPerBlock: r.msPerBlock };
    });
  }
}

function toRate(p: RatePrior): PrefillRate {
  return { msPerToken: 1000 / Math.max(1, p.tokensPerS), overheadMs: Math.max(0, p.overheadMs), msPerDecoding: 0, msPerBlock: 0 };
}
