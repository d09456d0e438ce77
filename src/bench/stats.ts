// Small statistics shared by the benchmarks.
import { percentile } from './report.js';

export interface Dist {
  n: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function dist(values: readonly number[]): Dist {
  const s = Float64Array.from(values).sort();
  const n = s.length;
  return {
    n,
    mean: n ? s.reduce((a, b) => a + b, 0) / n : NaN,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    max: n ? s[n - 1] : NaN,
  };
}

/** Coefficient of variation (population standard deviation / mean); 0 for a constant, NaN when empty. */
export function cov(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  if (mean === 0) return 0;
  const v = xs.reduce((a, b) => a + (b - mean) ** 2, 0) / xs.length;
  return Math.sqrt(v) / mean;
}

/** Total length covered by a set of [start, end] intervals (overlaps counted once). */
export function unionLength(intervals: ReadonlyArray<readonly [number, number]>): number {
  const s = [...intervals].sort((a, b) => a[0] - b[0]);
  let total = 0;
  let curS = -Infinity;
  let curE = -Infinity;
  for (const [a, b] of s) {
    if (a > curE) {
      if (curE > curS) total += curE - curS;
      curS = a;
      curE = b;
    } else if (b > curE) curE = b;
  }
  if (curE > curS) total += curE - curS;
  return total;
}

/** Evenly spaced quantiles of a distribution (for CDF charts and the JSON report). */
export function quantiles(values: readonly number[], points = 101): number[] {
  const s = Float64Array.from(values).sort();
  if (s.length === 0) return [];
  return Array.from(
    { length: points },
    (_, i) => s[Math.min(s.length - 1, Math.round((i / (points - 1)) * (s.length - 1)))],
  );
}
