import { describe, expect, it } from 'vitest';
import { DecisionLog } from '../../src/router/decision-log.js';
import type { Decision } from '../../src/scheduler/scheduler.js';

const decision = (instance: string, isl: number): Decision =>
  ({
    policy: 'kv',
    isl,
    blockSize: 16,
    seq: new BigUint64Array(isl / 16),
    adapter: null,
    reason: null,
    candidates: [],
    chosen: {
      instance,
      dpRank: 0,
      device: 2,
      host: 2,
      disk: 2,
      shared: 0,
      creditedBlocks: 2,
      prefillBlocks: 0,
      decodeBlocks: 0,
      cost: 1,
      load: { activePrefillTokens: 0, activeBlocks: 0, activeRequests: 0, decodingRequests: 0 },
      busy: false,
    },
  }) as unknown as Decision;

describe('DecisionLog', () => {
  it('keeps the last `capacity` decisions in order, builds records when read, and feeds subscribers', () => {
    let t = 0;
    const log = new DecisionLog(
      3,
      () => 'm',
      () => ++t,
    );
    const seen: string[] = [];
    for (let i = 0; i < 5; i++) log.routed!(decision(`e${i}`, 64), 0, 0);
    expect(log.recent(10).map((r) => [r.chosen, r.time])).toEqual([
      ['e2', 3],
      ['e3', 4],
      ['e4', 5],
    ]);
    expect(log.recent(2).map((r) => r.chosen)).toEqual(['e3', 'e4']);
    expect(log.recent(0)).toEqual([]);
    expect(log.recent(1)[0]).toMatchObject({
      model: 'm',
      policy: 'kv',
      prompt_tokens: 64,
      overlap_tokens: 32,
      attempt: 0,
      chosen_dp_rank: 0,
    });
    const off = log.subscribe((r) => seen.push(`${r.chosen}@${r.attempt}`));
    log.routed!(decision('e5', 32), 1, 0);
    off();
    log.routed!(decision('e6', 32), 0, 0);
    expect(seen).toEqual(['e5@1']);
    // Totals count first attempts only.
    expect([log.promptTokens, log.overlapTokens]).toEqual([5 * 64 + 32, 5 * 32 + 32]);
    expect(
      new DecisionLog(
        4,
        () => 'm',
        () => 0,
      ).recent(4),
    ).toEqual([]);
  });

  it("keeps each candidate's numbers, and fewer decisions when many candidates use up the rows", () => {
    const cand = (instance: string, i: number) => ({
      instance,
      dpRank: i % 2,
      device: i,
      host: i + 1,
      disk: i + 2,
      shared: 0,
      creditedBlocks: i,
      prefillBlocks: 10 - i,
      decodeBlocks: 3,
      cost: i / 4,
      load: { activePrefillTokens: 100 * i, activeBlocks: 7, activeRequests: 1, decodingRequests: 0 },
      busy: i === 1,
    });
    const many = (n: number, tag: string): Decision =>
      ({
        ...decision(`${tag}0`, 64),
        candidates: Array.from({ length: n }, (_, i) => cand(`${tag}${i}`, i)),
      }) as unknown as Decision;
    const log = new DecisionLog(
      2,
      () => 'm',
      () => 0,
    ); // 2 slots, 32 candidate rows
    log.routed!(many(3, 'a'), 0, 0);
    const [r] = log.recent(1);
    expect(r.candidates).toEqual(
      [0, 1, 2].map((i) => ({
        instance: `a${i}`,
        dp_rank: i % 2,
        overlap: { gpu: 16 * i, cpu: 16 * (i + 1), disk: 16 * (i + 2), shared: 0 },
        credited_blocks: i,
        prefill_blocks: 10 - i,
        decode_blocks: 3,
        cost: i / 4,
        load: { active_prefill_tokens: 100 * i, active_blocks: 7 },
        busy: i === 1,
      })),
    );
    // 20 then 20 candidates: the second reuses rows of the first, which is no longer returned.
    log.routed!(many(20, 'b'), 0, 0);
    log.routed!(many(20, 'c'), 0, 0);
    expect(log.recent(2).map((x) => [x.chosen, x.candidates.length, x.candidates[19].instance])).toEqual([
      ['c0', 20, 'c19'],
    ]);
    // More candidates than rows: the first 32 are kept.
    log.routed!(many(40, 'd'), 0, 0);
    expect(log.recent(5).map((x) => [x.chosen, x.candidates.length])).toEqual([['d0', 32]]);
    expect(log.since(0, 10)).toHaveLength(1);
  });
});
