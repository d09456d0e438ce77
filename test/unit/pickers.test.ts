import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { pickByCost } from '../../src/scheduler/cost.js';
import { byCost } from '../../src/scheduler/policies/pickers.js';
import type { PolicyContext } from '../../src/scheduler/policies/types.js';
import type { CandidateScore } from '../../src/scheduler/scheduler.js';

describe('byCost at temperature 0', () => {
  it('picks exactly what pickByCost picks over the costs, with the same draws of rand', () => {
    const r = mulberry32(42);
    const special = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY];
    for (let trial = 0; trial < 2000; trial++) {
      const n = Math.floor(r() * 12);
      // Few distinct values (many ties), now and then NaN or an infinity.
      const costs = Array.from({ length: n }, () => (r() < 0.1 ? special[Math.floor(r() * 3)] : Math.floor(r() * 4)));
      const c = costs.map((cost) => ({ cost }) as CandidateScore);
      const draws: number[] = [];
      const a = mulberry32(trial);
      const b = mulberry32(trial);
      const ctx = { temperature: 0, rand: () => (draws.push(0), a()) } as unknown as PolicyContext;
      const picked = byCost(c, ctx);
      let expectedDraws = 0;
      const expected = pickByCost(costs, 0, () => (expectedDraws++, b()));
      expect([picked, draws.length]).toEqual([expected, expectedDraws]);
    }
  });
});
