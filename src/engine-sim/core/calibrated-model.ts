// A perf model calibrated on measured step times of one model on one GPU (a ModelProfile).
//
// Single-sequence prefill T(N new tokens, P cached): the least-squares fit
// a + b·N + c·N·(P + N/2) (the last term: attention over the context) plus the fit's residual at
// the measured points, interpolated bilinearly in (N, P). Measured points are reproduced exactly;
// between them the fit carries the curvature (attention grows with N²), which halves the
// interpolation error of plain bilinear; beyond the grid the residual of the nearest edge is held,
// so the time continues from the last measured point along the fit's slopes. The fit alone is off
// by up to 25-39 % at single points, so it is only the shape, never the value, at a measured point.
//
// Several chunks in one pass (batched prefill): the linear layers see the summed tokens, each
// sequence attends only to itself: T(ΣN, 0) − A(ΣN) + Σ [A(Nᵢ) + T(Nᵢ, Pᵢ) − T(Nᵢ, 0)], with
// A(N) = c·N²/2 the fit's cold causal attention; never less than the longest chunk alone.
//
// Decode step of B sequences with summed context S: the least-squares fit d + e·B + f·S.
//
// Mixed pass (prefill chunks + decodes): the pass reads the weights once, so the decodes add
// their step less MIXED_SHARED of its fixed part d (the weight read): prefill + decode − 0.7·d.
// Measured (h200-mixed-passes.json): plain sums are off by up to 41 % for small chunks, this rule
// by at most 6 % (test/unit/perf-model.test.ts).
import type { PassContents, PassTime, PerfModel, PrefillChunk } from './perf-model.js';
import type { ModelProfile } from './perf-profile.js';

/** Share of the decode step's fixed cost a mixed pass saves (fitted on the 8B and 32B mixed rows: 0.73, 0.67). */
export const MIXED_SHARED = 0.7;

export interface PrefillFit {
  /** ms per pass. */
  a: number;
  /** ms per new token. */
  b: number;
  /** ms per new token per context token. */
  c: number;
}

export interface DecodeFit {
  /** ms per step. */
  d: number;
  /** ms per sequence. */
  e: number;
  /** ms per context token. */
  f: number;
}

/** Ordinary least squares (columns scaled to 1 before the normal equations, which span 1 to 1e8 here). */
export function leastSquares(rows: readonly number[][], y: readonly number[]): number[] {
  const k = rows[0].length;
  const scale = Array.from({ length: k }, (_, j) => Math.max(...rows.map((r) => Math.abs(r[j]))) || 1);
  const m = Array.from({ length: k }, () => new Array<number>(k + 1).fill(0));
  rows.forEach((r, i) => {
    for (let j = 0; j < k; j++) {
      const xj = r[j] / scale[j];
      for (let l = 0; l < k; l++) m[j][l] += xj * (r[l] / scale[l]);
      m[j][k] += xj * y[i];
    }
  });
  for (let col = 0; col < k; col++) {
    let pivot = col;
    for (let r = col + 1; r < k; r++) if (Math.abs(m[r][col]) > Math.abs(m[pivot][col])) pivot = r;
    if (!(Math.abs(m[pivot][col]) > 1e-12))
      throw new Error('the points do not determine a fit (too few distinct values)');
    [m[col], m[pivot]] = [m[pivot], m[col]];
    for (let r = 0; r < k; r++) {
      if (r === col) continue;
      const f = m[r][col] / m[col][col];
      for (let l = col; l <= k; l++) m[r][l] -= f * m[col][l];
    }
  }
  return m.map((row, j) => row[k] / row[j] / scale[j]);
}

/** Index pair and weight of `x` on the sorted axis `xs`, held at the ends. */
function bracket(xs: readonly number[], x: number): [number, number, number] {
  const last = xs.length - 1;
  if (x <= xs[0]) return [0, 0, 0];
  if (x >= xs[last]) return [last, last, 0];
  let i = 0;
  while (xs[i + 1] < x) i++;
  return [i, i + 1, (x - xs[i]) / (xs[i + 1] - xs[i])];
}

export class CalibratedModel implements PerfModel {
  readonly prefillFit: PrefillFit;
  readonly decodeFit: DecodeFit;
  private readonly news: number[];
  private readonly prefixes: number[];
  /** Measured − fit at news[i], prefixes[j]. */
  private readonly residual: number[][];

  constructor(
    readonly name: string,
    readonly profile: ModelProfile,
  ) {
    const p = profile.prefill;
    const [a, b, c] = leastSquares(
      p.map((r) => [1, r.new, r.new * (r.prefix + r.new / 2)]),
      p.map((r) => r.ms),
    );
    this.prefillFit = { a, b, c };
    const [d, e, f] = leastSquares(
      profile.decode.map((r) => [1, r.batch, r.batch * r.context]),
      profile.decode.map((r) => r.ms),
    );
    this.decodeFit = { d, e, f };
    this.news = [...new Set(p.map((r) => r.new))].sort((x, y) => x - y);
    this.prefixes = [...new Set(p.map((r) => r.prefix))].sort((x, y) => x - y);
    this.residual = this.news.map(() => new Array<number>(this.prefixes.length).fill(0));
    for (const r of p)
      this.residual[this.news.indexOf(r.new)][this.prefixes.indexOf(r.prefix)] = r.ms - this.fitMs(r.new, r.prefix);
  }

  /** The least-squares fit alone (the shape between and beyond measured points). */
  fitMs(newTokens: number, contextTokens: number): number {
    const { a, b, c } = this.prefillFit;
    return a + b * newTokens + c * newTokens * (contextTokens + newTokens / 2);
  }

  /** One sequence's prefill pass: `newTokens` computed after `contextTokens` cached. */
  prefillMs(newTokens: number, contextTokens: number): number {
    if (newTokens <= 0) return 0;
    const [i0, i1, tn] = bracket(this.news, newTokens);
    const [j0, j1, tp] = bracket(this.prefixes, contextTokens);
    const r = this.residual;
    const atP0 = r[i0][j0] + (r[i1][j0] - r[i0][j0]) * tn;
    const atP1 = r[i0][j1] + (r[i1][j1] - r[i0][j1]) * tn;
    return Math.max(0, this.fitMs(newTokens, contextTokens) + atP0 + (atP1 - atP0) * tp);
  }

  /** Several sequences' chunks in one pass (no decodes). */
  batchedPrefillMs(chunks: readonly PrefillChunk[]): number {
    if (chunks.length === 0) return 0;
    const live = chunks.filter((ch) => ch.newTokens > 0);
    if (live.length === 0) return 0;
    if (live.length === 1) return this.prefillMs(live[0].newTokens, live[0].contextTokens);
    const coldAttention = (n: number): number => (this.prefillFit.c * n * n) / 2;
    let total = 0;
    let own = 0;
    let longest = 0;
    for (const ch of live) {
      total += ch.newTokens;
      const alone = this.prefillMs(ch.newTokens, ch.contextTokens);
      longest = Math.max(longest, alone);
      own += coldAttention(ch.newTokens) + Math.max(0, alone - this.prefillMs(ch.newTokens, 0));
    }
    return Math.max(longest, this.prefillMs(total, 0) - coldAttention(total) + own);
  }

  /** A decode step alone: `decodes` sequences with `contextTokens` summed context. */
  decodeMs(decodes: number, contextTokens: number): number {
    if (decodes <= 0) return 0;
    const { d, e, f } = this.decodeFit;
    return Math.max(0, d + e * decodes + f * contextTokens);
  }

  pass(c: PassContents, out?: PassTime): PassTime {
    const prefillMs = this.batchedPrefillMs(c.prefills);
    const step = this.decodeMs(c.decodes, c.decodeContextTokens);
    const decodeMs = prefillMs > 0 && step > 0 ? Math.max(0, step - MIXED_SHARED * this.decodeFit.d) : step;
    if (out === undefined) return { prefillMs, decodeMs };
    out.prefillMs = prefillMs;
    out.decodeMs = decodeMs;
    return out;
  }
}
