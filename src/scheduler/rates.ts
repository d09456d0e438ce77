// Each worker's prefill speed, learned online from what the router sees: for every booking, the
// prefill work ahead of it plus its own uncached tokens (work), the same prefill's attention over
// its context (attention: Σ N·(P + N/2) for N tokens computed after P cached, the calibrated
// engines' context term), the requests decoding there when it was booked (every pass that prefills
// it also runs their decode step) and their summed context (a decode step reads their KV), and its
// time to first token (y). A decayed least-squares fit of
//   y = overheadMs + msPerToken work + msPerAttention attention + msPerDecoding decoding
//       + msPerDecodingContext decoding_context
// in relative terms (each sample weighted 1/y²: a 20 ms follow-up counts as much as a 2 s cold
// prompt, so neither is predicted at the other's cost), pulled toward the configured prior (ridge; the context terms toward 0, so a cold start is the
// flat per-token model): with no or uninformative data the prior stands, and one odd sample cannot
// swing it. Pure: callers pass every observation; no clocks.
import { WorkerMap } from '../common/worker-map.js';
import type { PrefillRate } from './cost.js';

/** One booking's first-token observation: PrefillRates.observe's arguments beyond the worker. */
export interface RateSample {
  workTokens: number;
  /** Σ N·(P + N/2) over the same prefills (token²; absent from older senders: 0). */
  attentionWork?: number;
  decoding: number;
  /** Context tokens of the requests decoding (absent from older senders: 0). */
  decodingContext?: number;
  ttftMs: number;
  pool: string;
}

const finiteNonNegative = (x: number | undefined): boolean => x === undefined || (Number.isFinite(x) && x >= 0);

/** A sample PrefillRates learns from: finite, non-negative work, attention, decoding, context and TTFT. */
export function validSample(
  s: Pick<RateSample, 'workTokens' | 'decoding' | 'ttftMs' | 'attentionWork' | 'decodingContext'>,
): boolean {
  return (
    finiteNonNegative(s.workTokens) &&
    finiteNonNegative(s.decoding) &&
    finiteNonNegative(s.ttftMs) &&
    finiteNonNegative(s.attentionWork) &&
    finiteNonNegative(s.decodingContext)
  );
}

export interface RatePrior {
  /** Prefill tokens per second assumed before data. */
  tokensPerS: number;
  /** Fixed time per request (network, scheduling, first decode step) assumed before data. */
  overheadMs: number;
}

// The regressors, in this order: work tokens, decoding requests, attention work, decoding context.
const K = 4;
/**
 * Weight of each prior coefficient, in its regressor's units squared: worth 5 samples spread
 * 2,000 tokens, 4 requests, 2e6 token² (1,000 tokens after 1,500 cached) and 16,000 context
 * tokens around their means. Only data that varies the context moves the context terms off 0.
 */
const PRIOR_WEIGHTS = [5 * 2000 * 2000, 5 * 4 * 4, 5 * 2e6 * 2e6, 5 * 16_000 * 16_000];
/** A sample's weight is 1/max(y, this)² (ms): the fit minimises relative errors, but a 1 ms first token is not 100x surer than a 10 ms one. */
const MIN_WEIGHTED_MS = 10;
/** The prior's weights count as samples of this TTFT (ms): 1/REF² each. */
const PRIOR_SAMPLE_MS = 100;
/** Each observation keeps this share of the older ones' weight (an effective window of ~200). */
const DECAY = 0.995;
/** A learned rate stays within this factor of the prior (a burst of timeouts is not a slow GPU). */
const BOUND = 20;
/** Most a decoding request may add to a first token (ms): far beyond any real decode step. */
const MAX_DECODE_MS = 100;
/** Most a token may cost per context token (ms): 50x the H200 8B shape's attention (1.9e-6). */
const MAX_ATTENTION_MS = 1e-4;
/** Most a decoding context token may add (ms): 30x the H200 8B shape's decode step (3.1e-5). */
const MAX_DECODE_CONTEXT_MS = 1e-3;

class Fit {
  /** Decayed sample count (the intercept's shrinkage) and weight sum (the means). */
  n = 0;
  w = 0;
  sy = 0;
  readonly s = new Float64Array(K);
  /** Σ x xᵀ, row-major. */
  readonly sxx = new Float64Array(K * K);
  readonly sxy = new Float64Array(K);
  samples = 0;

  add(x: readonly number[], y: number): void {
    const d = DECAY;
    const w = 1 / Math.max(y, MIN_WEIGHTED_MS);
    this.n = this.n * d + 1;
    this.w = this.w * d + w;
    this.sy = this.sy * d + w * y;
    for (let j = 0; j < K; j++) {
      this.s[j] = this.s[j] * d + w * x[j];
      this.sxy[j] = this.sxy[j] * d + w * x[j] * y;
      for (let k = 0; k < K; k++) this.sxx[j * K + k] = this.sxx[j * K + k] * d + w * x[j] * x[k];
    }
    this.samples++;
  }

  /**
   * The fit, ridge-shrunk toward `prior` with `strength` x the default prior weights; `pooledContext`:
   * the context terms (attention, decoding context) are the prior's, not fit here.
   */
  rate(prior: PrefillRate, strength = 1, pooledContext = false): PrefillRate {
    if (this.n < 1) return prior;
    const n = this.w;
    const p = [prior.msPerToken, prior.msPerDecoding, prior.msPerAttention, prior.msPerDecodingContext];
    const w = PRIOR_WEIGHTS.map((v) => (v * strength) / PRIOR_SAMPLE_MS);
    const lo = [prior.msPerToken / BOUND, 0, 0, 0];
    const hi = [prior.msPerToken * BOUND, MAX_DECODE_MS, MAX_ATTENTION_MS, MAX_DECODE_CONTEXT_MS];
    if (pooledContext) {
      lo[2] = hi[2] = prior.msPerAttention;
      lo[3] = hi[3] = prior.msPerDecodingContext;
    }
    const m = Array.from(this.s, (v) => v / n);
    const my = this.sy / n;
    // Centered (co)variances, ridge toward the prior coefficients.
    const a = new Float64Array(K * K);
    const r = new Array<number>(K);
    for (let j = 0; j < K; j++) {
      for (let k = 0; k < K; k++) a[j * K + k] = this.sxx[j * K + k] - n * m[j] * m[k];
      a[j * K + j] = Math.max(0, a[j * K + j]) + w[j];
      r[j] = this.sxy[j] - n * m[j] * my + w[j] * p[j];
    }
    let beta = boxedSolve(a, r, lo, hi);
    // The intercept shrinks toward the prior with few samples, as the slopes do.
    const kk = this.n / (this.n + 5 * strength);
    let overheadMs = kk * (my - dot(beta, m)) + (1 - kk) * prior.overheadMs;
    if (overheadMs < 0) {
      // No fixed cost fits: the plane goes through the origin (ridge toward the prior slopes).
      overheadMs = 0;
      for (let j = 0; j < K; j++) {
        for (let k = 0; k < K; k++) a[j * K + k] = this.sxx[j * K + k];
        a[j * K + j] += w[j];
        r[j] = this.sxy[j] + w[j] * p[j];
      }
      beta = boxedSolve(a, r, lo, hi);
    }
    return {
      msPerToken: beta[0],
      overheadMs,
      msPerDecoding: beta[1],
      msPerAttention: beta[2],
      msPerDecodingContext: beta[3],
    };
  }
}

const dot = (x: readonly number[], y: readonly number[]): number => x.reduce((acc, v, i) => acc + v * y[i], 0);

/**
 * a·β = r (a symmetric positive definite: the ridge terms are on its diagonal) with lo <= β <= hi:
 * a coefficient the solution pushes out of its bounds is held at the bound it crossed and the
 * others solved again (at most K rounds), so one clamped term does not leave the others biased.
 */
function boxedSolve(a: Float64Array, r: readonly number[], lo: readonly number[], hi: readonly number[]): number[] {
  // A coefficient whose bounds meet is given, not solved for.
  const fixed = lo.map((l, j): number | null => (l === hi[j] ? l : null));
  let beta = new Array<number>(K).fill(0);
  for (let round = 0; round <= K; round++) {
    const free = [...Array(K).keys()].filter((j) => fixed[j] === null);
    const rhs = free.map(
      (j) => r[j] - fixed.reduce<number>((acc, v, k) => acc + (v === null ? 0 : a[j * K + k] * v), 0),
    );
    const sub = free.map((j) => free.map((k) => a[j * K + k]));
    const x = solveScaled(sub, rhs);
    beta = fixed.map((v) => v ?? 0);
    for (let i = 0; i < free.length; i++) beta[free[i]] = x[i];
    // The free coefficient furthest out of its bounds (relative to them) is held there.
    let worst = -1;
    let excess = 0;
    for (const j of free) {
      const span = Math.max(hi[j] - lo[j], 1e-300);
      const e = Math.max(lo[j] - beta[j], beta[j] - hi[j]) / span;
      if (!(e <= excess)) {
        worst = j;
        excess = Number.isNaN(e) ? Infinity : e;
      }
    }
    if (worst < 0) return beta;
    fixed[worst] = Number.isNaN(beta[worst]) || beta[worst] < lo[worst] ? lo[worst] : hi[worst];
  }
  return beta.map((b, j) => Math.min(hi[j], Math.max(lo[j], Number.isFinite(b) ? b : lo[j])));
}

/** Gaussian elimination on the system scaled to a unit diagonal (the regressors span 1 to 1e9). */
function solveScaled(a: number[][], r: number[]): number[] {
  const k = r.length;
  if (k === 0) return [];
  const d = a.map((row, j) => 1 / Math.sqrt(row[j] > 0 ? row[j] : 1));
  const m = a.map((row, j) => [...row.map((v, l) => v * d[j] * d[l]), r[j] * d[j]]);
  for (let col = 0; col < k; col++) {
    let pivot = col;
    for (let i = col + 1; i < k; i++) if (Math.abs(m[i][col]) > Math.abs(m[pivot][col])) pivot = i;
    [m[col], m[pivot]] = [m[pivot], m[col]];
    if (!(Math.abs(m[col][col]) > 1e-12)) continue;
    for (let i = 0; i < k; i++) {
      if (i === col) continue;
      const f = m[i][col] / m[col][col];
      for (let l = col; l <= k; l++) m[i][l] -= f * m[col][l];
    }
  }
  return m.map((row, j) => (Math.abs(row[j]) > 1e-12 ? (row[k] / row[j]) * d[j] : 0));
}

export interface RateSnapshot {
  instance: string;
  dpRank: number;
  samples: number;
  tokensPerS: number;
  overheadMs: number;
  msPerDecoding: number;
  msPerAttention: number;
  msPerDecodingContext: number;
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
   * requests decoding on the worker when it was booked, `ttftMs` as seen; `pool` = its model;
   * `context`: the same prefills' attention work and the decoding requests' context (RateSample).
   */
  observe(
    instance: string,
    dpRank: number,
    workTokens: number,
    decoding: number,
    ttftMs: number,
    pool = '',
    context: Pick<RateSample, 'attentionWork' | 'decodingContext'> = {},
  ): void {
    const { attentionWork = 0, decodingContext = 0 } = context;
    if (!validSample({ workTokens, decoding, ttftMs, attentionWork, decodingContext })) return;
    let f = this.fits.get(instance, dpRank);
    if (!f) this.fits.set(instance, dpRank, (f = { instance, dpRank, pool, fit: new Fit() }));
    f.pool = pool;
    const x = [workTokens, decoding, attentionWork, decodingContext];
    f.fit.add(x, ttftMs);
    let p = this.pools.get(pool);
    if (!p) this.pools.set(pool, (p = new Fit()));
    p.add(x, ttftMs);
  }

  /** observe() of a RateSample (what a booking's free gives, here or on a peer replica). */
  observeSample(instance: string, dpRank: number, s: RateSample): void {
    this.observe(instance, dpRank, s.workTokens, s.decoding, s.ttftMs, s.pool, s);
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
    // The context terms are the pool's: what attention over a prefix and a decode step's KV read
    // cost is the model's and the GPU's, the same on every worker; a worker's own samples mostly
    // learned noise in them (measured: 0 to 1.3e-4 ms per decoding context token on identical
    // engines, and the router chasing the workers that looked fast).
    return f ? f.fit.rate(base, PEER_STRENGTH, true) : base;
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
        msPerAttention: r.msPerAttention,
        msPerDecodingContext: r.msPerDecodingContext,
      };
    });
  }
}

function toRate(p: RatePrior): PrefillRate {
  return {
    msPerToken: 1000 / Math.max(1, p.tokensPerS),
    overheadMs: Math.max(0, p.overheadMs),
    msPerDecoding: 0,
    msPerAttention: 0,
    msPerDecodingContext: 0,
  };
}
