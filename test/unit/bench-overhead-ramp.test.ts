// The overhead benchmark's ramp: when a target counts as no longer growing.
import { describe, expect, it } from 'vitest';
import { rampFlatSteps } from '../../src/bench/overhead/measure.js';

describe('rampFlatSteps', () => {
  it('resets on more than 3 % growth, counts flat steps only from minConcurrency on', () => {
    expect(rampFlatSteps(1, 1040, 1000, 32, 16)).toBe(0); // grew 4 %
    expect(rampFlatSteps(1, 1020, 1000, 32, 16)).toBe(2); // 2 %: flat, the ramp stops this target
    expect(rampFlatSteps(0, 800, 1000, 2, 16)).toBe(0); // a dip at concurrency 2 does not count
    expect(rampFlatSteps(1, 800, 1000, 16, 16)).toBe(2);
  });

  it('replays a ramp that dipped early: it runs on to its real peak', () => {
    const steps: Array<[number, number]> = [[1, 1000], [2, 900], [4, 950], [8, 1500], [16, 1800], [32, 1790], [64, 1700], [128, 1750]];
    let flat = 0;
    let best = 0;
    const ran: number[] = [];
    for (const [c, rps] of steps) {
      if (flat >= 2) break;
      ran.push(c);
      flat = rampFlatSteps(flat, rps, best, c, 16);
      best = Math.max(best, rps);
    }
    expect(best).toBe(1800);
    expect(ran).toEqual([1, 2, 4, 8, 16, 32, 64]);
  });
});
