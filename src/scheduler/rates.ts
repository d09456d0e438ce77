// Each worker's prefill speed, learned online from what the router sees: for every booking, the
// prefill work ahead of it plus its own uncached tokens (work), the same prefill's attention over
// its context (attention: Σ N·(P + N/2) for N tokens computed after P cached, the calibrated
// engines' context term), the requests decoding there when it was booked (every pass that prefills
// it also runs their decode step) and their summed context (a decode step reads their KV), and its
// time to first token (y). A decayed least-squares fit of
//   y = overheadMs + msPerToken work + msPerAttention attention + msPerDecoding decoding
//       + msPerDecodingContext decoding_context
// in relative terms (each sample weighted 1/y: a 20 ms follow-up is not drowned by a 2 s cold
// prompt), robust (a sample the fit so far misses by more than its typical relative miss counts less,
// Huber: see Fit.add), pulled toward the configured prior (ridge; the context terms toward 0, so a
// cold start is the flat per-token model): with no or uninformative data the prior stands, and one
// odd sample cannot swing it. Pure: callers pass every observation; no clocks.
import { CandidateIds } from '../common/candidate-ids.js';
import { WorkerMap } from '../common/worker-map.js';
import { grow } from '../indexer/layout.js';
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

/**
 * Most any term of a sample may be: far beyond a real one (a million-token prompt's attention work is
 * 1.5e12), and small enough that the fit's sums of squares stay finite (one 1e200 sample made them
 * Infinity, and the decayed sums never forget an Infinity: the worker's and pool's fits were lost).
 */
const MAX_SAMPLE_TERM = 1e18;
const finiteNonNegative = (x: number | undefined): boolean =>
  x === undefined || (Number.isFinite(x) && x >= 0 && x <= MAX_SAMPLE_TERM);

/** A sample PrefillRates learns from: finite, non-negative, bounded work, attention, decoding, context and TTFT. */
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
/**
 * Robust weights (Huber): a sample the fit so far misses by more than ROBUST_K x its typical
 * relative miss counts ROBUST_K x typical / miss of a full sample. First tokens have a heavy tail
 * the router cannot see coming (a request routed there after it that joins its passes, a pass
 * already running, a prefix the engine had evicted): in least squares those few dragged the plane
 * (measured on the bursty Mooncake run: attention learned at 0.4x the engine's, the decode-context
 * term at 6x, short prompts predicted 40 % slow and long ones 20 % fast; median error 19 %).
 * K = 1 and the steps below measured best of 1-1.5 x 0.05-0.1 x 0.3-1 (bench fleet, 3 seeds).
 */
const ROBUST_K = 1;
/**
 * The typical miss: a running median of the relative misses, moved by this factor per sample
 * (a worker sees 1/16 of a 16-engine pool's samples: 5 % per step left its weights in full for
 * most of a 2,000-request run).
 */
const SCALE_STEP = 0.1;
/** Where it starts (30 %: ~12 samples missed by more lift it to 100 %, so a poor prior is not held) and its floor. */
const SCALE_START = 0.3;
const SCALE_MIN = 0.01;
/** The prior a fit judges its next sample by (weights only: what the fit learns is shrunk toward the caller's). */
const JUDGE_PRIOR: PrefillRate = {
  msPerToken: 0.05,
  overheadMs: 20,
  msPerDecoding: 0,
  msPerAttention: 0,
  msPerDecodingContext: 0,
};

// A fit's sums, FIT_STRIDE doubles at its offset in a buffer: PrefillRates keeps its workers' in one
// buffer by fit id, so that a pool refresh re-pricing a thousand fits reads them in order, not a cold
// object and three typed arrays each.
/** Decayed sample count (the intercept's shrinkage) and weight sum (the means). */
const F_N = 0;
const F_W = 1;
const F_SY = 2;
/** Running median of the samples' relative misses by the fit before them (the robust weights' scale). */
const F_SCALE = 3;
const F_SAMPLES = 4;
const F_S = 5;
/** Σ x xᵀ, row-major. */
const F_SXX = F_S + K;
const F_SXY = F_SXX + K * K;
/** 29 used: 32, four cache lines. */
const FIT_STRIDE = 32;

/** A fit with nothing learned, at `o` of `d`. */
function clearFit(d: Float64Array, o: number): void {
  d.fill(0, o, o + FIT_STRIDE);
  d[o + F_SCALE] = SCALE_START;
}

class Fit {
  /** Where its sums are (PrefillRates moves a worker's to a larger buffer as fits are made). */
  d: Float64Array;
  o: number;

  /** A fit with nothing learned at `o` of `d` (`copied`: the sums there are kept). */
  constructor(d: Float64Array = new Float64Array(FIT_STRIDE), o = 0, copied = false) {
    this.d = d;
    this.o = o;
    if (!copied) clearFit(d, o);
  }

  get samples(): number {
    return this.d[this.o + F_SAMPLES];
  }

  copy(): Fit {
    return new Fit(this.d.slice(this.o, this.o + FIT_STRIDE), 0, true);
  }

  /**
   * One sample, weighted 1/y and by how far `judge` (this fit's rate before it, null: in full)
   * misses it: in full within ROBUST_K x the typical miss, less beyond (Huber).
   */
  add(x: readonly number[], y: number, judge: PrefillRate | null = null): void {
    const f = this.d;
    const o = this.o;
    const d = DECAY;
    let w = 1 / Math.max(y, MIN_WEIGHTED_MS);
    if (judge) {
      const miss = Math.abs(predictedMs(judge, x) - y) / Math.max(y, MIN_WEIGHTED_MS);
      const scale = f[o + F_SCALE];
      const limit = ROBUST_K * scale;
      if (miss > limit) w *= limit / miss;
      f[o + F_SCALE] = Math.max(SCALE_MIN, scale * (miss > scale ? 1 + SCALE_STEP : 1 - SCALE_STEP));
    }
    f[o + F_N] = f[o + F_N] * d + 1;
    f[o + F_W] = f[o + F_W] * d + w;
    f[o + F_SY] = f[o + F_SY] * d + w * y;
    for (let j = 0; j < K; j++) {
      f[o + F_S + j] = f[o + F_S + j] * d + w * x[j];
      f[o + F_SXY + j] = f[o + F_SXY + j] * d + w * x[j] * y;
      for (let k = 0; k < K; k++) f[o + F_SXX + j * K + k] = f[o + F_SXX + j * K + k] * d + w * x[j] * x[k];
    }
    f[o + F_SAMPLES]++;
  }

  /** fitRate of this fit. */
  rate(prior: PrefillRate, strength = 1, pooledContext = false): PrefillRate {
    return fitRate(this.d, this.o, prior, strength, pooledContext);
  }
}

/**
 * The fit at `o` of `d`, ridge-shrunk toward `prior` with `strength` x the default prior weights;
 * `pooledContext`: the context terms (attention, decoding context) are the prior's, not fit here. No
 * allocation beyond the result (module scratch arrays): callers cache it, but a pool's change
 * recomputes every worker's on the next decision.
 */
function fitRate(f: Float64Array, o: number, prior: PrefillRate, strength = 1, pooledContext = false): PrefillRate {
  const count = f[o + F_N];
  if (count < 1) return prior;
  const n = f[o + F_W];
  const { p, w, lo, hi, m, a, r, beta } = SCRATCH;
  p[0] = prior.msPerToken;
  p[1] = prior.msPerDecoding;
  p[2] = prior.msPerAttention;
  p[3] = prior.msPerDecodingContext;
  for (let j = 0; j < K; j++) w[j] = (PRIOR_WEIGHTS[j] * strength) / PRIOR_SAMPLE_MS;
  lo[0] = prior.msPerToken / BOUND;
  hi[0] = prior.msPerToken * BOUND;
  lo[1] = 0;
  hi[1] = MAX_DECODE_MS;
  lo[2] = pooledContext ? prior.msPerAttention : 0;
  hi[2] = pooledContext ? prior.msPerAttention : MAX_ATTENTION_MS;
  lo[3] = pooledContext ? prior.msPerDecodingContext : 0;
  hi[3] = pooledContext ? prior.msPerDecodingContext : MAX_DECODE_CONTEXT_MS;
  for (let j = 0; j < K; j++) m[j] = f[o + F_S + j] / n;
  const my = f[o + F_SY] / n;
  for (let j = 0; j < K; j++) {
    for (let k = 0; k < K; k++) a[j * K + k] = f[o + F_SXX + j * K + k] - n * m[j] * m[k];
    a[j * K + j] = Math.max(0, a[j * K + j]) + w[j];
    r[j] = f[o + F_SXY + j] - n * m[j] * my + w[j] * p[j];
  }
  boxedSolve(a, r, lo, hi, beta);
  const kk = count / (count + 5 * strength);
  let fitted = my;
  for (let j = 0; j < K; j++) fitted -= beta[j] * m[j];
  let overheadMs = kk * fitted + (1 - kk) * prior.overheadMs;
  if (overheadMs < 0) {
    overheadMs = 0;
    for (let j = 0; j < K; j++) {
      for (let k = 0; k < K; k++) a[j * K + k] = f[o + F_SXX + j * K + k];
      a[j * K + j] += w[j];
      r[j] = f[o + F_SXY + j] + w[j] * p[j];
    }
    boxedSolve(a, r, lo, hi, beta);
  }
  return {
    msPerToken: beta[0],
    overheadMs,
    msPerDecoding: beta[1],
    msPerAttention: beta[2],
    msPerDecodingContext: beta[3],
  };
}

/** A rate's TTFT for regressors x (work tokens, decoding, attention work, decoding context): cost.ts's queue + own, summed. */
function predictedMs(r: PrefillRate, x: readonly number[]): number {
  return (
    r.overheadMs +
    r.msPerToken * x[0] +
    r.msPerDecoding * x[1] +
    r.msPerAttention * x[2] +
    r.msPerDecodingContext * x[3]
  );
}

/** Working memory of Fit.rate and its solver (one rate at a time: plain synchronous code). */
const SCRATCH = {
  p: new Float64Array(K),
  w: new Float64Array(K),
  lo: new Float64Array(K),
  hi: new Float64Array(K),
  m: new Float64Array(K),
  a: new Float64Array(K * K),
  r: new Float64Array(K),
  beta: new Float64Array(K),
  fixed: new Uint8Array(K),
  free: new Int32Array(K),
  /** The free coefficients' system, scaled, augmented: K rows of K + 1. */
  sys: new Float64Array(K * (K + 1)),
  scale: new Float64Array(K),
};

/**
 * a·β = r (a symmetric positive definite: the ridge terms are on its diagonal) with lo <= β <= hi,
 * into `beta`: a coefficient the solution pushes out of its bounds is held at the bound it crossed
 * and the others solved again (at most K rounds), so one clamped term does not leave the others
 * biased. A coefficient whose bounds meet is given, not solved for.
 */
function boxedSolve(a: Float64Array, r: Float64Array, lo: Float64Array, hi: Float64Array, beta: Float64Array): void {
  const { fixed, free } = SCRATCH;
  for (let j = 0; j < K; j++) {
    fixed[j] = lo[j] === hi[j] ? 1 : 0;
    beta[j] = fixed[j] ? lo[j] : 0;
  }
  for (let round = 0; round <= K; round++) {
    let nf = 0;
    for (let j = 0; j < K; j++) if (!fixed[j]) free[nf++] = j;
    solveFree(a, r, beta, nf);
    // The free coefficient furthest out of its bounds (relative to them) is held there.
    let worst = -1;
    let excess = 0;
    for (let i = 0; i < nf; i++) {
      const j = free[i];
      const span = Math.max(hi[j] - lo[j], 1e-300);
      const e = Math.max(lo[j] - beta[j], beta[j] - hi[j]) / span;
      if (!(e <= excess)) {
        worst = j;
        excess = Number.isNaN(e) ? Infinity : e;
      }
    }
    if (worst < 0) return;
    fixed[worst] = 1;
    beta[worst] = Number.isNaN(beta[worst]) || beta[worst] < lo[worst] ? lo[worst] : hi[worst];
  }
  for (let j = 0; j < K; j++) beta[j] = Math.min(hi[j], Math.max(lo[j], Number.isFinite(beta[j]) ? beta[j] : lo[j]));
}

/**
 * The free coefficients (SCRATCH.free[0..nf)) of a·β = r given the fixed ones in `beta`: Gaussian
 * elimination with partial pivoting on the system scaled to a unit diagonal (the regressors span 1
 * to 1e9 and their squares far more).
 */
function solveFree(a: Float64Array, r: Float64Array, beta: Float64Array, nf: number): void {
  const { free, fixed, sys, scale } = SCRATCH;
  const W = K + 1;
  for (let i = 0; i < nf; i++) {
    const j = free[i];
    scale[i] = 1 / Math.sqrt(a[j * K + j] > 0 ? a[j * K + j] : 1);
  }
  for (let i = 0; i < nf; i++) {
    const j = free[i];
    let rhs = r[j];
    for (let k = 0; k < K; k++) if (fixed[k]) rhs -= a[j * K + k] * beta[k];
    for (let l = 0; l < nf; l++) sys[i * W + l] = a[j * K + free[l]] * scale[i] * scale[l];
    sys[i * W + nf] = rhs * scale[i];
  }
  for (let col = 0; col < nf; col++) {
    let pivot = col;
    for (let i = col + 1; i < nf; i++) if (Math.abs(sys[i * W + col]) > Math.abs(sys[pivot * W + col])) pivot = i;
    if (pivot !== col)
      for (let l = 0; l <= nf; l++) {
        const t = sys[col * W + l];
        sys[col * W + l] = sys[pivot * W + l];
        sys[pivot * W + l] = t;
      }
    const d = sys[col * W + col];
    if (!(Math.abs(d) > 1e-12)) continue;
    for (let i = 0; i < nf; i++) {
      if (i === col) continue;
      const f = sys[i * W + col] / d;
      if (f === 0) continue;
      for (let l = col; l <= nf; l++) sys[i * W + l] -= f * sys[col * W + l];
    }
  }
  for (let i = 0; i < nf; i++) {
    const d = sys[i * W + i];
    beta[free[i]] = Math.abs(d) > 1e-12 ? (sys[i * W + nf] / d) * scale[i] : 0;
  }
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
 * (measured: 20-40 % early in a run), so a greedy cost never warmed the cold one. 32, not 8: a
 * worker's few dozen samples over its own range of work trade slope for intercept; at 8, identical
 * engines (the fleet simulator's Mooncake trace) priced a 24k-token prefill up to 1.43x apart before
 * the robust fit, 1.26x with it, and kv sent the long prompts to the one that looked fast, whose
 * decoding requests then missed their TPOT (test/unit/rates-identical-workers.test.ts, docs/tuning.md).
 */
const PEER_STRENGTH = 32;

/**
 * Per worker fits, shrunk toward their pool's fit (the model's workers share hardware and model,
 * so a worker the router has not used yet starts from what its peers showed, not from the
 * configured guess: an idle instance is not mistaken for a slow one), itself shrunk toward the prior.
 */
/** A fit and its last rate, reused until a sample arrives or what it was shrunk toward changes. */
interface CachedFit {
  fit: Fit;
  rate: PrefillRate | null;
  /** The base (worker) or the prior's two values (pool) `rate` was computed from. */
  base: PrefillRate | null;
  tokensPerS: number;
  overheadMs: number;
}

/** Rates by fit id, a column per term (PrefillRates.rateById's rate, written with it). */
export class RateColumns {
  msPerToken = new Float64Array(64);
  overheadMs = new Float64Array(64);
  msPerDecoding = new Float64Array(64);
  msPerAttention = new Float64Array(64);
  msPerDecodingContext = new Float64Array(64);

  write(id: number, r: PrefillRate): void {
    if (id >= this.msPerToken.length) {
      const n = Math.max(id + 1, this.msPerToken.length * 2);
      this.msPerToken = grow(this.msPerToken, n);
      this.overheadMs = grow(this.overheadMs, n);
      this.msPerDecoding = grow(this.msPerDecoding, n);
      this.msPerAttention = grow(this.msPerAttention, n);
      this.msPerDecodingContext = grow(this.msPerDecodingContext, n);
    }
    this.msPerToken[id] = r.msPerToken;
    this.overheadMs[id] = r.overheadMs;
    this.msPerDecoding[id] = r.msPerDecoding;
    this.msPerAttention[id] = r.msPerAttention;
    this.msPerDecodingContext[id] = r.msPerDecodingContext;
  }

  /** The rate of fit `id` into `r`. */
  read(id: number, r: PrefillRate): PrefillRate {
    r.msPerToken = this.msPerToken[id];
    r.overheadMs = this.overheadMs[id];
    r.msPerDecoding = this.msPerDecoding[id];
    r.msPerAttention = this.msPerAttention[id];
    r.msPerDecodingContext = this.msPerDecodingContext[id];
    return r;
  }
}

/** A worker's fit; `id`: its place in PrefillRates' by-id list and sums (its rate: memoRate by id). */
interface WorkerFit {
  fit: Fit;
  instance: string;
  dpRank: number;
  pool: string;
  id: number;
}

/**
 * A pool's rate follows every sample for its first 64, then every 8th (`priced`, a copy of its fit
 * then, so that when a rate is read never changes what it is): it moves little per sample (a
 * window of ~200), and each change re-prices every worker's fit at the next decision (a 4-term
 * solve per candidate: at 1,024 candidates about as long as the rest of the decision).
 */
const POOL_REFRESH = 8;
const POOL_WARMUP = 64;

export class PrefillRates {
  private readonly fits = new WorkerMap<WorkerFit>();
  /**
   * The fits by a dense id, so that a candidate list is resolved once (CandidateIds: while the list
   * is the same and no fit was made or dropped) and a decision reads an array, not a string-keyed
   * lookup per candidate.
   */
  private readonly byId: Array<WorkerFit | undefined> = [];
  /** The workers' fits' sums, FIT_STRIDE by fit id (each worker's Fit is a window of it). */
  private sums = new Float64Array(64 * FIT_STRIDE);
  private readonly freeIds: number[] = [];
  /** Changes when a fit is made (a candidate without one may have one now), `taken` when an instance's are dropped. */
  private version = 0;
  private taken = 0;
  private readonly listIds = new CandidateIds();
  /**
   * Per fit id, its last rate and the base it was shrunk toward, and
   * that rate's terms as columns: a decision reads arrays, not each worker's fit and rate objects.
   */
  private readonly memoRate: Array<PrefillRate | undefined> = [];
  private readonly memoBase: Array<PrefillRate | undefined> = [];
  readonly columns = new RateColumns();
  private readonly idOrNone = (instance: string, dpRank: number): number => this.fits.get(instance, dpRank)?.id ?? -1;
  private readonly pools = new Map<string, CachedFit & { priced: Fit }>();

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
    if (!f) {
      const id = this.freeIds.pop() ?? this.byId.length;
      if ((id + 1) * FIT_STRIDE > this.sums.length) this.growSums((id + 1) * FIT_STRIDE);
      this.fits.set(instance, dpRank, (f = { fit: new Fit(this.sums, id * FIT_STRIDE), instance, dpRank, pool, id }));
      this.byId[id] = f;
      this.version++;
    }
    f.pool = pool;
    const x = [workTokens, decoding, attentionWork, decodingContext];
    let p = this.pools.get(pool);
    // Plain literal (no keys after a spread: V8's slow path).
    if (!p)
      this.pools.set(
        pool,
        (p = { fit: new Fit(), rate: null, base: null, tokensPerS: NaN, overheadMs: NaN, priced: new Fit() }),
      );
    // Each fit judges the sample by its rate before it, as workerRate/poolRate would price it (against a
    // fixed prior: a judgement may not depend on which prior a caller last read, or on whether it read).
    const poolJudge = p.fit.rate(JUDGE_PRIOR);
    f.fit.add(x, ttftMs, f.fit.rate(poolJudge, PEER_STRENGTH, true));
    this.memoRate[f.id] = undefined;
    p.fit.add(x, ttftMs, poolJudge);
    if (p.fit.samples <= POOL_WARMUP || p.fit.samples % POOL_REFRESH === 0) {
      p.priced = p.fit.copy();
      p.rate = null;
    }
  }

  /** observe() of a RateSample (what a booking's free gives, here or on a peer replica). */
  observeSample(instance: string, dpRank: number, s: RateSample): void {
    this.observe(instance, dpRank, s.workTokens, s.decoding, s.ttftMs, s.pool, s);
  }

  /** The pool's rate (the prior until it has data): what its workers shrink toward. */
  poolRate(prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    const pf = this.pools.get(pool);
    if (!pf) return toRate(prior);
    if (pf.rate && pf.tokensPerS === prior.tokensPerS && pf.overheadMs === prior.overheadMs) return pf.rate;
    // The ridge alone decides how far a few samples move it off the prior (no sample gate: with
    // one, a cold instance sat at the configured guess while its peers had learned).
    pf.rate = pf.priced.rate(toRate(prior));
    pf.tokensPerS = prior.tokensPerS;
    pf.overheadMs = prior.overheadMs;
    return pf.rate;
  }

  /** A worker's learned rate, shrunk toward `base` (its pool's rate; kept while `base` is the same object). */
  workerRate(instance: string, dpRank: number, base: PrefillRate): PrefillRate {
    const f = this.fits.get(instance, dpRank);
    return f ? this.rateById(f.id, base) : base;
  }

  /** The candidates' fit ids (-1: no fit), in order, for rateById: no lookup for a list seen before. */
  idsOf(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.listIds.of(candidates, this.version, this.idOrNone, this.taken);
  }

  /** workerRate of the worker whose fit id (idsOf) is `id`. */
  rateById(id: number, base: PrefillRate): PrefillRate {
    if (id < 0) return base;
    const r = this.memoRate[id];
    if (r !== undefined && this.memoBase[id] === base) return r;
    return this.byId[id] === undefined ? base : this.priceFit(id, base);
  }

  /** Fit `id`'s rate shrunk toward `base`, kept (memoRate, the columns) until a sample or another base. */
  private priceFit(id: number, base: PrefillRate): PrefillRate {
    // The context terms are the pool's: what attention over a prefix and a decode step's KV read
    // cost is the model's and the GPU's, the same on every worker; a worker's own samples mostly
    // learned noise in them (measured: 0 to 1.3e-4 ms per decoding context token on identical
    // engines, and the router chasing the workers that looked fast).
    const r = fitRate(this.sums, id * FIT_STRIDE, base, PEER_STRENGTH, true);
    this.memoRate[id] = r;
    this.memoBase[id] = base;
    this.columns.write(id, r);
    return r;
  }

  /** A larger buffer for the workers' sums (their fits move with them). */
  private growSums(atLeast: number): void {
    const next = new Float64Array(Math.max(atLeast, this.sums.length * 2));
    next.set(this.sums);
    this.sums = next;
    for (const f of this.byId) if (f !== undefined) f.fit.d = next;
  }

  /** The worker's learned rate (its pool's, or the prior, until it has data). */
  rate(instance: string, dpRank: number, prior: RatePrior = DEFAULT_RATE_PRIOR, pool = ''): PrefillRate {
    return this.workerRate(instance, dpRank, this.poolRate(prior, pool));
  }

  /** Forget an instance (removed from the pool). */
  drop(instance: string): void {
    for (const f of this.fits.values())
      if (f.instance === instance) {
        this.byId[f.id] = undefined;
        this.memoRate[f.id] = undefined;
        this.freeIds.push(f.id);
      }
    if (this.fits.deleteInstance(instance) > 0) this.taken++;
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
