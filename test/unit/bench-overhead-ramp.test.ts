// The overhead benchmark's ramp: when a target counts as no longer growing; and how a step's CPU
// splits over the processes of a target.
import { describe, expect, it } from 'vitest';
import { busyCores, cpuSplitUsPerReq, rampFlatSteps, type Step } from '../../src/bench/overhead/measure.js';

describe('rampFlatSteps', () => {
  it('resets on more than 3 % growth, counts flat steps only from minConcurrency on', () => {
    expect(rampFlatSteps(1, 1040, 1000, 32, 16)).toBe(0); // grew 4 %
    expect(rampFlatSteps(1, 1020, 1000, 32, 16)).toBe(2); // 2 %: flat, the ramp stops this target
    expect(rampFlatSteps(0, 800, 1000, 2, 16)).toBe(0); // a dip at concurrency 2 does not count
    expect(rampFlatSteps(1, 800, 1000, 16, 16)).toBe(2);
  });

  it('replays a ramp that dipped early: it runs on to its real peak', () => {
    const steps: Array<[number, number]> = [
      [1, 1000],
      [2, 900],
      [4, 950],
      [8, 1500],
      [16, 1800],
      [32, 1790],
      [64, 1700],
      [128, 1750],
    ];
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

describe('cpuSplitUsPerReq', () => {
  const at = (...xs: Array<[number, number]>) => xs.map(([pid, seconds]) => ({ pid, seconds }));
  it('gives each process its µs per request over the measured part of the step', () => {
    // 1,000 requests, the CPU window 1.5 times the measured part: 0.3 s of a worker = 200 µs/req.
    expect(
      cpuSplitUsPerReq(at([10, 1], [11, 2], [12, 3]), at([10, 1.003], [11, 2.3], [12, 3.015]), 1000, 1.5)!.map(
        (x) => +x.toFixed(3),
      ),
    ).toEqual([2, 200, 10]);
  });
  it('is null when the processes changed between the readings, or nothing completed', () => {
    expect(cpuSplitUsPerReq(at([10, 1], [11, 2]), at([10, 1.1], [13, 0.1]), 1000, 1)).toBeNull();
    expect(cpuSplitUsPerReq(at([10, 1], [11, 2]), at([10, 1.1]), 1000, 1)).toBeNull();
    expect(cpuSplitUsPerReq(at([10, 1]), at([10, 1.1]), 0, 1)).toBeNull();
    expect(cpuSplitUsPerReq(null, at([10, 1.1]), 10, 1)).toBeNull();
  });
});

describe('busyCores', () => {
  const step = (over: Partial<Step>): Step => ({
    concurrency: 16,
    rps: 4000,
    latencyMs: { n: 0, mean: 0, p50: 0, p90: 0, p99: 0, max: 0 },
    errors: 0,
    proxyCpuUsPerReq: 200,
    loadgenCores: 0.4,
    upstreamCpuUsPerReq: 60,
    ...over,
  });
  it('adds the proxy, the upstreams (per request, at the step rate) and the load generator', () => {
    // 4,000 req/s x (200 + 60) µs = 1.04 cores, + 0.4 of the load generator.
    expect(busyCores(step({}))).toBeCloseTo(1.44, 10);
    expect(busyCores(step({ rps: 8000, loadgenCores: 0.8 }))).toBeCloseTo(2.88, 10);
  });
  it('is null when a part was not measured', () => {
    expect(busyCores(step({ upstreamCpuUsPerReq: null }))).toBeNull();
    expect(busyCores(step({ upstreamCpuUsPerReq: undefined }))).toBeNull();
    expect(busyCores(step({ proxyCpuUsPerReq: null }))).toBeNull();
  });
});
