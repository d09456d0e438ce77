// routing.recompute_weight (time cost model): a request's own uncached prefill counted once more.
// The example is a decision from the leaderboard's decision log (llm-d shape, 48 requests/s, seed 0,
// 4 engines): the holder of the group's 93-block prefix has 1,080 ms of prefill queued, a cold
// engine 720 ms; without the term the cold one wins (1,100 against 1,162.4 ms), recomputing 5,952
// cached tokens.
import { describe, expect, it } from 'vitest';
import { cost, type CostWeights } from '../../src/scheduler/cost.js';

const RATE = { msPerToken: 0.05, overheadMs: 20, msPerDecoding: 0, msPerAttention: 0, msPerDecodingContext: 0 };
const W: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.75, disk: 0.25, shared: 0 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const base = { host: 0, disk: 0, shared: 0, activeBlocks: 0, decodingRequests: 0, newBlocks: 0 };
const holder = { ...base, device: 93, host: 93, disk: 93, activePrefillTokens: 21_600 };
const cold = { ...base, device: 0, activePrefillTokens: 14_400 };

describe('recompute_weight', () => {
  it('adds weight x the own uncached prefill to the cost, nothing else', () => {
    const w0 = cost(cold, 7200, 64, W, RATE);
    const w1 = cost(cold, 7200, 64, { ...W, recomputeWeight: 1 }, RATE);
    expect(w0.cost).toBeCloseTo(720 + 20 + 360, 9);
    expect(w1.ttftMs).toBe(w0.ttftMs);
    expect(w1.cost).toBeCloseTo(w0.cost + 7200 * 0.05, 9);
    // The blocks model is Dynamo's: untouched.
    const blocks = { ...W, model: 'blocks' as const };
    expect(cost(cold, 7200, 64, { ...blocks, recomputeWeight: 1 }, RATE).cost).toBe(
      cost(cold, 7200, 64, blocks, RATE).cost,
    );
  });

  it('keeps the request on the holder of its prefix when the queue it saves is less than (1 + w) x the prefill it adds', () => {
    const pick = (w: number) =>
      cost(holder, 7200, 64, { ...W, recomputeWeight: w }, RATE).cost <
      cost(cold, 7200, 64, { ...W, recomputeWeight: w }, RATE).cost
        ? 'holder'
        : 'cold';
    // Queue saved 360 ms; prefill added (7,200 - 5,952) tokens vs 7,200: 297.6 ms.
    expect(pick(0)).toBe('cold');
    expect(pick(0.25)).toBe('holder');
  });
});
