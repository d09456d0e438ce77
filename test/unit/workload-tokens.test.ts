// The workloads' seeded token ids: fillTokens draws rng(mix(seed, key))'s sequence (mulberry32) with
// its state in a local; the ids must be the closure's, draw for draw.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fillTokens, mix, rng, tokenBlock } from '../../src/bench/workloads/tokens.js';

/** mulberry32 as src/common/prng.ts wrote it before its draw was split out (the reference). */
function reference(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('workload token ids', () => {
  it('fillTokens writes the draws of rng(mix(seed, key)), at any offset', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.integer({ min: 0, max: 600 }),
        fc.integer({ min: 0, max: 9 }),
        (seed, key, len, at) => {
          const r = reference(mix(seed, key));
          const draws = rng(mix(seed, key));
          const want = Array.from({ length: len }, () => {
            const x = r();
            expect(draws()).toBe(x);
            return 1000 + Math.floor(x * 99_000);
          });
          const out = new Uint32Array(at + len + 2).fill(7);
          fillTokens(out, at, seed, key, len);
          expect([...out.subarray(at, at + len)]).toEqual(want);
          expect([...out.subarray(0, at), ...out.subarray(at + len)]).toEqual(new Array(at + 2).fill(7));
          expect([...tokenBlock(seed, key, len)]).toEqual(want);
        },
      ),
      { numRuns: 200 },
    );
  });
});
