// The time cost credits the progress of the prefill at the head of a worker's queue: a booking
// still before its first token has been computing since the work booked ahead of it was done
// (chunked prefill), so what a new request waits for is less than the whole booked prefill; once
// past its predicted end without a first token, the credit falls back (the engine is behind).
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';
import { type CostInput, type CostWeights, cost, type PrefillRate } from '../../src/scheduler/cost.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';

const TIME: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0, disk: 0, shared: 0 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const RATE: PrefillRate = {
  msPerToken: 0.05,
  overheadMs: 20,
  msPerDecoding: 0,
  msPerAttention: 1e-6,
  msPerDecodingContext: 0,
};

describe('queue head progress (time cost)', () => {
  // The head: 2,000 tokens after 4,000 cached (attention 2,000 x (4,000 + 1,000) = 1e7), booked
  // when 1,000 cold tokens were queued ahead of it (attention 1,000 x 500 = 5e5; done since); one
  // booking of 500 cold tokens behind it (attention 125,000). Queued: 2,500 tokens, 10,125,000.
  // The head starts 1,000 x 0.05 + 5e5 x 1e-6 = 50.5 ms after its booking and computes for
  // 2,000 x 0.05 + 1e7 x 1e-6 = 110 ms.
  const input = (elapsedMs: number): CostInput => ({
    device: 0,
    host: 0,
    disk: 0,
    shared: 0,
    activePrefillTokens: 2500,
    activeAttention: 1e7 + 125_000,
    activeBlocks: 0,
    decodingRequests: 0,
    newBlocks: 0,
    head: { elapsedMs, aheadTokens: 1000, aheadAttention: 5e5, prefillTokens: 2000, attention: 1e7 },
  });
  const queue = (elapsedMs: number) => cost(input(elapsedMs), 64, 64, TIME, RATE);

  it('owes the whole queue until the head has started', () => {
    // 2,500 x 0.05 + 10,125,000 x 1e-6 = 135.125 ms.
    expect(queue(40).queueMs).toBeCloseTo(135.125, 9);
    expect(queue(40).headDone).toBe(0);
  });

  it('subtracts what the head has computed since it started', () => {
    // 80 ms after its booking the head has run 80 - 50.5 = 29.5 ms of its 110.
    expect(queue(80).queueMs).toBeCloseTo(135.125 - 29.5, 9);
    expect(queue(80).headDone).toBeCloseTo(29.5 / 110, 12);
    expect(queue(80).ttftMs).toBeCloseTo(135.125 - 29.5 + 20 + 64 * 0.05 + 64 * 32 * 1e-6, 9);
  });

  it('never credits more than the head itself: the booking behind it is still owed', () => {
    // At its predicted end (50.5 + 110 = 160.5 ms): 500 x 0.05 + 125,000 x 1e-6 = 25.125 ms.
    expect(queue(160.5).queueMs).toBeCloseTo(25.125, 9);
    expect(queue(160.5).headDone).toBeCloseTo(1, 12);
  });

  it('an overdue head is taken to need as long again as it is late, at most itself', () => {
    // 200 ms after its booking, no first token: 200 - 160.5 = 39.5 ms late, so 39.5 of its 110
    // are owed again (credited 70.5): 135.125 - 70.5 = 64.625 ms.
    expect(queue(200).queueMs).toBeCloseTo(64.625, 9);
    expect(queue(200).headDone).toBeCloseTo(70.5 / 110, 12);
    // Late by its own time or more (from 270.5 ms): nothing credited, the whole queue is owed.
    expect(queue(270.5).queueMs).toBeCloseTo(135.125, 9);
    expect(queue(10_000).queueMs).toBeCloseTo(135.125, 9);
    expect(queue(10_000).headDone).toBe(0);
  });

  it('without a head, the booked prefill is owed in full (the blocks model ignores it)', () => {
    expect(cost({ ...input(80), head: null }, 64, 64, TIME, RATE).queueMs).toBeCloseTo(135.125, 9);
    const blocks = { ...TIME, model: 'blocks' as const };
    expect(cost(input(80), 64, 64, blocks, RATE).cost).toBe(
      cost({ ...input(80), head: null }, 64, 64, blocks, RATE).cost,
    );
  });
});

describe('the queue as bookings see it', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const route = (n: number, salt: number): RouteInput => ({
    ns,
    candidates: [{ instance: 'a', dpRank: 0 }],
    tokens: Array.from({ length: n }, (_, i) => salt * 100_000 + i + 1),
    policy: 'kv',
    weights: TIME,
    temperature: 0,
  });

  it('predicts what is left of the head, and the next head starts when the one before it was due', () => {
    // The prior: 0.05 ms a token, no context term (nothing learned).
    const s = new Scheduler(new TieredIndexer(), mulberry32(1));
    const book = (n: number, salt: number, id: string, now: number) =>
      s.book(s.decide(route(n, salt), now), ns, { requestId: id, now, speculativeTtlMs: 0 });
    book(2000, 1, 'q', 0);
    // q (100 ms of work) has run 60 ms: 40 are left. Its own 400 tokens: 20 + 20 ms.
    const d60 = s.decide(route(400, 2), 60).chosen!;
    expect(d60.queueMs).toBeCloseTo(40, 9);
    expect(d60.ttftMs).toBeCloseTo(40 + 20 + 400 * 0.05, 9);
    // r queues behind the 40 % of q not done (800 tokens).
    expect(book(1000, 3, 'r', 60).aheadTokens).toBe(800);
    // q's first token: r is the head, started when q was predicted done (60 + 800 x 0.05 = 100) and
    // has run 30 of its 50 ms at 130.
    s.prefillComplete('q', 110);
    expect(s.decide(route(400, 4), 130).chosen!.queueMs).toBeCloseTo(20, 9);
    // r is due at 150; at 160 it is 10 ms late: 10 ms owed again (not 0).
    expect(s.decide(route(400, 4), 160).chosen!.queueMs).toBeCloseTo(10, 9);
    // 350 ms late, more than its own 50: owed in full, as before it started.
    expect(s.decide(route(400, 4), 500).chosen!.queueMs).toBeCloseTo(50, 9);
  });

  it('keeps the un-prefilled bookings in booking order through first tokens, failures and frees', () => {
    const a = new ActiveSequences();
    const blocks = new BigUint64Array(0);
    for (const [i, id] of ['a', 'b', 'c', 'd'].entries()) a.book(id, 'w', 0, blocks, 100 * (i + 1), i);
    expect(a.queueHead('w', 0)?.id).toBe('a');
    // The head failed before its first token: the next booking is the head.
    a.free('a');
    expect(a.queueHead('w', 0)?.id).toBe('b');
    // A booking behind the head finishing first does not change the head.
    a.prefillComplete('c');
    expect(a.queueHead('w', 0)?.id).toBe('b');
    a.prefillComplete('b');
    expect(a.queueHead('w', 0)?.id).toBe('d');
    a.prefillComplete('d');
    expect(a.queueHead('w', 0)).toBeUndefined();
    expect(a.queueHead('other', 0)).toBeUndefined();
    for (const id of ['b', 'c', 'd']) a.free(id);
    expect(a.size).toBe(0);
    expect(a.totals().activePrefillTokens).toBe(0);
  });
});
