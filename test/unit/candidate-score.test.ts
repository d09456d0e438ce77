// A candidate's score keeps what the pick reads and computes the rest of its cost breakdown again
// when read (scheduler.ts, Score): the values must be the cost model's for what the decision saw,
// and must not move when the scheduler's state does after the decision (bookings, frees, rates).
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { attentionWork, type CostWeights, cost } from '../../src/scheduler/cost.js';
import { DEFAULT_RATE_PRIOR } from '../../src/scheduler/rates.js';
import { type CandidateScore, type RouteInput, Scheduler, withCost } from '../../src/scheduler/scheduler.js';
import { SCORE_FIELDS } from '../helpers/score-fields.js';

const snapshot = (c: CandidateScore) => Object.fromEntries(SCORE_FIELDS.map((f) => [f, c[f]]));

const W: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0.1,
  decodeBlockMs: 0.01,
};
const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
const names = ['a', 'b', 'c', 'd', 'e'];

function setup(): { s: Scheduler; route: (salt: number, now: number) => RouteInput } {
  const indexer = new TieredIndexer();
  const s = new Scheduler(indexer, mulberry32(3));
  const space = indexer.namespace(ns);
  const tokens = Array.from({ length: 400 }, (_, i) => i + 1);
  const seq = seqHashes(tokens, ns.blockSize, space.space);
  // Prefixes of different depths on GPU and CPU tiers (fractional credits), one instance distrusted.
  space.index.store(space.index.holder('a', 0, 'GPU'), seq.subarray(0, 60));
  space.index.store(space.index.holder('b', 0, 'GPU'), seq.subarray(0, 20));
  space.index.store(space.index.holder('b', 0, 'CPU'), seq.subarray(0, 70));
  space.index.store(space.index.holder('c', 0, 'GPU'), seq.subarray(0, 90));
  s.distrusted.add('c');
  const route = (salt: number, now: number): RouteInput => ({
    ns,
    candidates: names.map((instance) => ({ instance, dpRank: 0 })),
    tokens: salt === 0 ? tokens : Array.from({ length: 300 + salt }, (_, i) => salt * 10_000 + i),
    policy: 'kv',
    weights: W,
    temperature: 0,
    evictionAware: true,
    adapter: 'lora-1',
    adapterLoadMs: 37.5,
    adapterWarmMs: 10_000,
    engineLoad: (i) => (i === 'd' ? { running: 3, waiting: 2, kvUsage: 0.9, at: now } : null),
    engineWeights: { waiting: 1, running: 1, kvUsageMs: 50 },
    busy: { maxActivePrefillTokens: 303, maxActiveBlocks: 1_000_000 },
  });
  return { s, route };
}

describe('candidate scores', () => {
  it("are the cost model's breakdown of what the decision saw", () => {
    const { s, route } = setup();
    // In-flight load: queue heads, decoding requests, an adapter used on 'a'.
    let now = 0;
    for (const [k, inst] of ['a', 'a', 'b', 'e'].entries()) {
      const d = s.decide({ ...route(k + 1, now), target: inst, policy: 'direct' }, now);
      s.book(d, ns, { requestId: `r${k}`, now, speculativeTtlMs: 0 });
      now += 7;
    }
    s.prefillComplete('r0', now);
    now = 28; // 'e' booked at 21: its head is part done
    const d = s.decide(route(0, now), now);
    expect(d.candidates).toHaveLength(names.length);
    const isl = d.isl;
    for (const c of d.candidates) {
      const head = c.load.activePrefillTokens > 0 ? s.active.queueHead(c.instance, c.dpRank) : undefined;
      const rate = s.rates.rate(c.instance, c.dpRank, DEFAULT_RATE_PRIOR, ns.model);
      if (c.instance === 'd') continue; // its unbooked load uses the scheduler's running means (engine-load.test.ts)
      const b = cost(
        {
          device: c.device,
          host: c.host,
          disk: c.disk,
          shared: c.shared,
          activePrefillTokens: c.load.activePrefillTokens,
          activeAttention: c.load.activeAttention,
          activeBlocks: c.load.activeBlocks,
          decodingRequests: c.load.decodingRequests,
          decodingContext: c.load.decodingContext,
          head: head
            ? {
                elapsedMs: now - head.createdAt,
                aheadTokens: head.aheadTokens,
                aheadAttention: head.aheadAttention,
                prefillTokens: head.prefillTokens,
                attention: attentionWork(head.prefillTokens, head.contextTokens),
              }
            : null,
          newBlocks: c.newBlocks,
        },
        isl,
        ns.blockSize,
        W,
        rate,
      );
      expect({
        creditedBlocks: c.creditedBlocks,
        prefillBlocks: c.prefillBlocks,
        decodeBlocks: c.decodeBlocks,
        queueMs: c.queueMs,
        prefillMs: c.prefillMs,
        ttftMs: c.ttftMs,
        interferenceMs: c.interferenceMs,
        headDone: c.headDone,
        tokensPerS: c.tokensPerS,
        cost: c.cost,
      }).toEqual({
        creditedBlocks: b.creditedBlocks,
        prefillBlocks: b.prefillBlocks,
        decodeBlocks: b.decodeBlocks,
        queueMs: b.queueMs,
        prefillMs: b.prefillMs,
        ttftMs: b.ttftMs + c.adapterLoadMs,
        interferenceMs: b.interferenceMs,
        headDone: b.headDone,
        tokensPerS: 1000 / rate.msPerToken,
        cost: b.cost + c.adapterLoadMs,
      });
    }
    // The case covers what it claims: fractional credit, a queue head part done, an adapter
    // penalty and a warm adapter, a distrusted instance, unbooked engine load, a busy worker.
    const by = new Map(d.candidates.map((c) => [c.instance, c]));
    expect(by.get('b')!.creditedBlocks % 1).not.toBe(0);
    expect(d.candidates.some((c) => (c.headDone ?? 0) > 0 && (c.headDone ?? 0) < 1)).toBe(true);
    expect(by.get('a')!.adapterLoadMs).toBe(0);
    expect(by.get('c')!.adapterLoadMs).toBe(37.5);
    expect(by.get('c')!.distrusted).toBe(true);
    expect(by.get('d')!.unbookedRequests).toBe(5);
    expect(d.candidates.some((c) => c.busy)).toBe(true);
  });

  it('do not change after the decision, whatever the scheduler does next', () => {
    const { s, route } = setup();
    let now = 0;
    for (const [k, inst] of ['a', 'b', 'b', 'e'].entries()) {
      const d = s.decide({ ...route(k + 1, now), target: inst, policy: 'direct' }, now);
      s.book(d, ns, { requestId: `r${k}`, now, speculativeTtlMs: 1000 });
      now += 5;
    }
    const d = s.decide(route(0, now), now);
    const before = d.candidates.map(snapshot);
    // Book it and more, complete and free requests (rates learn from them), drop an instance.
    s.book(d, ns, { requestId: 'x', now, speculativeTtlMs: 1000 });
    for (const [k, id] of ['r0', 'r1', 'r2', 'r3', 'x'].entries()) {
      s.prefillComplete(id, now + 30 + k);
      s.free(id);
    }
    for (let k = 0; k < 6; k++) {
      const id = `y${k}`;
      s.book(s.decide(route(20 + k, now + 50), now + 50), ns, { requestId: id, now: now + 50, speculativeTtlMs: 0 });
      s.prefillComplete(id, now + 60 + 3 * k);
      if (k % 2 === 0) s.free(id);
    }
    s.distrusted.delete('c');
    s.dropInstance('e');
    expect(d.candidates.map(snapshot)).toEqual(before);
    // And the scheduler did change: the same prompt now prices differently.
    expect(s.decide(route(0, now + 100), now + 100).candidates.map(snapshot)).not.toEqual(before);
  });

  it('copied with another cost keep everything else (a spread would drop what they compute when read)', () => {
    const { s, route } = setup();
    const d0 = s.decide({ ...route(1, 0), target: 'a', policy: 'direct' }, 0);
    s.book(d0, ns, { requestId: 'r', now: 0, speculativeTtlMs: 0 });
    const d = s.decide(route(0, 5), 5);
    for (const c of d.candidates) {
      const copy = withCost(c, c.cost + 12.5);
      expect(snapshot(copy)).toEqual({ ...snapshot(c), cost: c.cost + 12.5 });
      expect(c.cost).toBe(snapshot(c).cost); // the scheduler's score is left as scored
    }
    expect(d.candidates.some((c) => c.queueMs > 0)).toBe(true);
  });
});
