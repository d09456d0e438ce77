// Assertions shared by the benchmark tests' report checks.
import { expect } from 'vitest';

/** A latency distribution as the reports hold it. */
export interface Dist {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Percentiles of a real distribution: positive and in order. */
export function ordered(d: Dist): void {
  expect(d.p50).toBeGreaterThan(0);
  expect(d.p50).toBeLessThanOrEqual(d.p90);
  expect(d.p90).toBeLessThanOrEqual(d.p99);
  expect(d.p99).toBeLessThanOrEqual(d.max);
}
