import { describe, expect, it } from 'vitest';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';
import { cost, type CostWeights, creditedBlocks, pickByCost } from '../../src/scheduler/cost.js';
import { POLICIES, readsIndex } from '../../src/scheduler/policies/registry.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';
import { PrefillRates, type RateSample } from '../../src/scheduler/rates.js';

// The Dynamo block cost: these tests hold kvrouter to the seed's worked examples.
const W: CostWeights = {
  model: 'blocks',
  overlapWeight: 1,
  medium: { cpu: 0.5, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const zero = {
  device: 0,
  host: 0,
  disk: 0,
  shared: 0,
  activePrefillTokens: 0,
  activeBlocks: 0,
  decodingRequests: 0,
  newBlocks: 0,
};
const RATE = { msPerToken: 0.05, overheadMs: 20, msPerDecoding: 0, msPerAttention: 0, msPerDecodingContext: 0 };

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

describe('cost function', () => {
  it("reproduces Dynamo's worked example (w = 1, block size 1)", () => {
    // ISL 10: W1 cached 2 (prefill 8) decode 10; W2 cached 5, decode 5; W3 cached 8, decode 9.
    const c = (cached: number, decode: number) =>
      cost({ ...zero, device: cached, host: cached, disk: cached, activeBlocks: decode }, 10, 1, W, RATE).cost;
    expect([c(2, 10), c(5, 5), c(8, 9)]).toEqual([18, 10, 11]);
  });

  it('credits the HiCache shared pool beyond the device prefix', () => {
    // The seed's example: 4 blocks, shared pool holds 0-3, multiplier 0.5. Its table leaves the
    // device credit out (W0 3.0, W1 2.0); with it, W0 = 4 - 2 - 0.5 x 2 = 1 and W1 = 4 - 0.5 x 4 = 2.
    const m = { ...W, medium: { cpu: 0, disk: 0, shared: 0.5 } };
    expect(cost({ ...zero, device: 2, host: 2, disk: 2, shared: 4 }, 4, 1, m, RATE).cost).toBe(1);
    expect(cost({ ...zero, shared: 4 }, 4, 1, m, RATE).cost).toBe(2);
  });

  it('credits each block once at the best of tier and shared weights', () => {
    const m = { cpu: 0.75, disk: 0.25, shared: 0.5 };
    expect(creditedBlocks({ device: 2, host: 4, disk: 6, shared: 0 }, m)).toBe(2 + 2 * 0.75 + 2 * 0.25);
    // Shared covers 0..5: host range at max(0.75, 0.5), disk range 4..5 at 0.5 and 5..6 at 0.25.
    expect(creditedBlocks({ device: 2, host: 4, disk: 6, shared: 5 }, m)).toBe(2 + 1.5 + 0.5 + 0.25);
    expect(creditedBlocks({ device: 0, host: 0, disk: 0, shared: 8 }, m)).toBe(4);
  });

  it('never credits more than the prompt and ignores decode when not tracked', () => {
    const b = cost(
      { ...zero, device: 10, host: 10, disk: 10, activeBlocks: 7, newBlocks: 3 },
      64,
      16,
      { ...W, trackActiveBlocks: false },
      RATE,
    );
    expect(b).toMatchObject({
      creditedBlocks: 10,
      prefillBlocks: 0,
      decodeBlocks: 0,
      cost: 0,
      queueMs: 0,
      prefillMs: 20,
      interferenceMs: 0,
    });
  });
});

describe('pickByCost', () => {
  it('temperature 0 picks the minimum, breaking ties uniformly', () => {
    const rand = seeded(1);
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 4000; i++) counts[pickByCost([5, 3, 9, 3], 0, rand)]++;
    expect(counts[0] + counts[2]).toBe(0);
    expect(Math.abs(counts[1] - counts[3])).toBeLessThan(400);
  });

  it('temperature > 0 follows the range-normalised softmax', () => {
    const rand = seeded(7);
    const counts = [0, 0];
    for (let i = 0; i < 20000; i++) counts[pickByCost([0, 10], 1, rand)]++;
    // p(worst) = e^-1 / (1 + e^-1) = 0.2689
    expect(counts[1] / 20000).toBeGreaterThan(0.25);
    expect(counts[1] / 20000).toBeLessThan(0.29);
    expect(pickByCost([], 0, rand)).toBe(-1);
  });
});

describe('ActiveSequences', () => {
  it('counts shared in-flight blocks once and returns to exactly zero', () => {
    const a = new ActiveSequences();
    const p1 = BigUint64Array.of(1n, 2n, 3n);
    const p2 = BigUint64Array.of(1n, 2n, 4n, 5n);
    a.book('r1', 'w', 0, p1, 48, 0);
    // r2 computes 30 tokens after 34 cached: attention 30 x (34 + 15); r1's 48 after none: 48 x 24.
    a.book('r2', 'w', 0, p2, 30, 0, '', 34);
    expect(a.load('w', 0)).toEqual({
      activePrefillTokens: 78,
      activeAttention: 48 * 24 + 30 * 49,
      activeBlocks: 5,
      activeRequests: 2,
      decodingRequests: 0,
      decodingContext: 0,
    });
    expect(a.get('r2')).toMatchObject({ contextTokens: 34, aheadTokens: 48, aheadAttention: 48 * 24 });
    expect(a.newBlocks('w', 0, BigUint64Array.of(1n, 2n, 9n))).toBe(1);
    expect(a.newBlocks('x', 0, p1)).toBe(3);
    expect(a.prefillComplete('r1')).toBe(true);
    expect(a.prefillComplete('r1')).toBe(true);
    expect(a.load('w', 0)).toMatchObject({
      activePrefillTokens: 30,
      activeAttention: 30 * 49,
      decodingRequests: 1,
      decodingContext: 48,
    });
    expect(a.free('r1')).toBe(true);
    expect(a.free('r1')).toBe(false);
    expect(a.load('w', 0)).toEqual({
      activePrefillTokens: 30,
      activeAttention: 30 * 49,
      activeBlocks: 4,
      activeRequests: 1,
      decodingRequests: 0,
      decodingContext: 0,
    });
    expect(() => a.book('r2', 'w', 0, p1, 1, 0)).toThrow(/already exists/);
    expect(a.sweep(1000, 500)).toEqual(['r2']);
    expect(a.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
    expect(a.size).toBe(0);
  });
});

describe('ActiveSequences: held prefixes by binary search', () => {
  it('equal the block-by-block count for prompts that share prefixes (a seq hash names its prefix)', () => {
    const rnd = seeded(17);
    const int = (n: number) => Math.floor(rnd() * n);
    for (let run = 0; run < 200; run++) {
      // Prompts as chains of a tree: each branches off an earlier one at a random depth.
      const prompts: bigint[][] = [];
      for (let p = 0; p < 8; p++) {
        const base = p === 0 ? [] : prompts[int(p)].slice(0, int(20));
        prompts.push([
          ...base,
          ...Array.from({ length: 1 + int(20) }, (_, i) => BigInt(run * 1_000_000 + p * 1000 + i + 1)),
        ]);
      }
      const a = new ActiveSequences();
      const booked = prompts.filter(() => rnd() < 0.5);
      booked.forEach((p, i) => {
        a.book(`r${i}`, 'w', 0, BigUint64Array.from(p), 1, 0);
      });
      if (booked.length > 1 && rnd() < 0.5) a.free('r0');
      const held = new Set(booked.filter((_, i) => a.get(`r${i}`) !== undefined).flat());
      for (const p of prompts) {
        let linear = 0;
        while (linear < p.length && held.has(p[linear])) linear++;
        expect(a.newBlocks('w', 0, BigUint64Array.from(p))).toBe(p.length - linear);
      }
    }
  });
});

describe('Scheduler', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const cands = [
    { instance: 'a', dpRank: 0 },
    { instance: 'b', dpRank: 0 },
    { instance: 'c', dpRank: 0 },
  ];
  const tokens = Array.from({ length: 64 }, (_, i) => i + 1);
  const input = (over: Partial<RouteInput> = {}): RouteInput => ({
    ns,
    candidates: cands,
    tokens,
    policy: 'kv',
    weights: W,
    temperature: 0,
    ...over,
  });

  function withCache() {
    const indexer = new TieredIndexer();
    const seq = seqHashes(tokens, 4, hashSpace());
    const idx = indexer.namespace(ns).index;
    idx.store(idx.holder('b', 0, 'GPU'), seq.subarray(0, 8));
    idx.store(idx.holder('c', 0, 'CPU'), seq.subarray(0, 16));
    return indexer;
  }

  it('routes to the warm instance and explains every candidate', () => {
    const s = new Scheduler(withCache(), seeded(3));
    const d = s.decide(input(), 0);
    // 16 blocks on CPU at 0.5 credit as much as 8 on GPU: b and c tie, a is cold.
    expect(['b', 'c']).toContain(d.chosen?.instance);
    expect(
      d.candidates.map((c) => [
        c.instance,
        c.device,
        c.host,
        c.disk,
        c.creditedBlocks,
        c.prefillBlocks,
        c.decodeBlocks,
        c.cost,
      ]),
    ).toEqual([
      ['a', 0, 0, 0, 0, 16, 16, 32],
      ['b', 8, 8, 8, 8, 8, 16, 24],
      ['c', 0, 16, 16, 8, 8, 16, 24],
    ]);
    // Host credit 0.75 makes c strictly better; 0.25 makes b better.
    expect(s.decide(input({ weights: { ...W, medium: { ...W.medium, cpu: 0.75 } } }), 0).chosen?.instance).toBe('c');
    expect(s.decide(input({ weights: { ...W, medium: { ...W.medium, cpu: 0.25 } } }), 0).chosen?.instance).toBe('b');
  });

  it('says which filter removed a candidate, which scorer ranked them and which pick step chose', () => {
    const s = new Scheduler(withCache(), seeded(3));
    // b is over a busy threshold once it holds a booking of 64 tokens; c was tried and failed.
    s.book(s.decide(input({ policy: 'direct', target: 'b' }), 0), ns, { requestId: 'r0', now: 0, speculativeTtlMs: 0 });
    const busy = { maxActivePrefillTokens: 10, maxActiveBlocks: 1000 };
    const d = s.decide(input({ busy, exclude: new Set(['c']) }), 1);
    expect(d.chosen?.instance).toBe('a');
    expect(d.filtered).toEqual([
      { filter: 'excluded', instance: 'c', dpRank: 0 },
      { filter: 'busy', instance: 'b', dpRank: 0 },
    ]);
    expect(d.steps).toEqual({ scorer: 'blocks', picker: 'byCostWithAffinity' });
    // The direct policy keeps a busy target (no busy filter); every candidate filtered: the reason says why.
    expect(s.decide(input({ policy: 'direct', target: 'b', busy }), 1).filtered).toEqual([]);
    expect(s.decide(input({ busy, exclude: new Set(['a', 'c']) }), 1).reason).toBe('all_busy');
    expect(s.decide(input({ exclude: new Set(['a', 'b', 'c']) }), 1).reason).toBe('no_candidates');
    expect(s.decide(input({ policy: 'round-robin' }), 1).steps).toEqual({ scorer: 'blocks', picker: 'rotation' });
  });

  it('queries the index only for a policy that declares it reads it (needs.index or needs.predictions)', () => {
    const indexer = withCache();
    const index = indexer.namespace(ns).index;
    // Count the walks on the real index (the scheduler's one read of it per decision).
    let walks = 0;
    const overlapsFor = index.overlapsFor.bind(index);
    index.overlapsFor = (...a: Parameters<typeof overlapsFor>) => {
      walks++;
      return overlapsFor(...a);
    };
    const s = new Scheduler(indexer, seeded(5));
    // A booking in flight, so that loads, eviction awareness and in-flight blocks take part.
    s.book(s.decide(input({ policy: 'direct', target: 'a' }), 0), ns, { requestId: 'r0', now: 0, speculativeTtlMs: 0 });
    const busy = { maxActivePrefillTokens: 10, maxActiveBlocks: 1000 };
    const reads: string[] = [];
    for (const p of POLICIES) {
      const before = walks;
      const d = s.decide(
        input({ policy: p.name, sessionKey: 'u1', target: 'c', busy, evictionAware: true, text: null }),
        1,
      );
      if (walks > before) reads.push(p.name);
      expect(walks - before).toBe(readsIndex(p) ? 1 : 0);
      // The explanation is still whole: every candidate, the busy filter (policies that keep it), the steps.
      expect(d.candidates.map((c) => c.instance)).toEqual(['a', 'b', 'c']);
      expect(d.steps).toEqual({ scorer: 'blocks', picker: p.pick.name });
      expect(d.filtered).toEqual(p.busyFilter ? [{ filter: 'busy', instance: 'a', dpRank: 0 }] : []);
      // What the index holds (b: 8 GPU blocks, c: 16 CPU blocks) shows only where it was read.
      const cached = d.candidates.map((c) => [c.device, c.host]);
      expect(cached).toEqual([[0, 0], readsIndex(p) ? [8, 8] : [0, 0], readsIndex(p) ? [0, 16] : [0, 0]]);
    }
    expect(reads.sort()).toEqual(['approx', 'dynamo', 'kv', 'llm-d', 'vllm-router']);
  });

  it('booking raises load and adds a speculative insert that steers the next identical request', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(5));
    const d1 = s.decide(input(), 0);
    const first = d1.chosen!.instance;
    s.book(d1, ns, { requestId: 'r1', now: 0, speculativeTtlMs: 2000 });
    expect(s.active.load(first, 0)).toEqual({
      activePrefillTokens: 64,
      activeAttention: 64 * 32,
      activeBlocks: 16,
      activeRequests: 1,
      decodingRequests: 0,
      decodingContext: 0,
    });
    // While r1 prefills, its queued tokens offset the cache credit: a tie.
    expect(new Set(s.decide(input(), 5).candidates.map((c) => c.cost))).toEqual(new Set([32]));
    s.prefillComplete('r1');
    const d2 = s.decide(input(), 10);
    expect(d2.chosen!.instance).toBe(first);
    expect(d2.chosen!.device).toBe(16);
    s.free('r1');
    // After the TTL the prediction is gone.
    expect(s.decide(input(), 2001).candidates.every((c) => c.device === 0)).toBe(true);
    expect(s.active.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
  });

  it("a failed attempt's free withdraws its speculative insert, a served one's keeps it, and hooks hear which", () => {
    const s = new Scheduler(new TieredIndexer(), seeded(5));
    const freed: Array<[string, boolean]> = [];
    s.addHooks({ freed: (id, _rate, failed) => void freed.push([id, failed]) });
    const onA = input({ policy: 'direct', target: 'a' });
    const deviceOnA = (now: number) => s.decide(input(), now).candidates.find((c) => c.instance === 'a')!.device;
    s.book(s.decide(onA, 0), ns, { requestId: 'cut', now: 0, speculativeTtlMs: 2000 });
    expect(deviceOnA(1)).toBe(16);
    s.free('cut', { failed: true, now: 5 });
    // The retry (or the next request) sees what the engine has: nothing.
    expect(deviceOnA(6)).toBe(0);
    s.book(s.decide(onA, 10), ns, { requestId: 'served', now: 10, speculativeTtlMs: 2000 });
    s.free('served', { failed: false, now: 20 });
    expect(deviceOnA(21)).toBe(16);
    // A failure after a served request's insert takes back only its own claim.
    s.book(s.decide(onA, 30), ns, { requestId: 'cut2', now: 30, speculativeTtlMs: 2000 });
    s.free('cut2', { failed: true, now: 35 });
    expect(deviceOnA(36)).toBe(16);
    expect(freed).toEqual([
      ['cut', true],
      ['served', false],
      ['cut2', true],
    ]);
    expect(s.active.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
  });

  it('reports all_busy, skips excluded candidates, and honours direct targets', () => {
    const s = new Scheduler(withCache(), seeded(9));
    const d = s.decide(input(), 0);
    s.book(d, ns, { requestId: 'x', now: 0, speculativeTtlMs: 0 });
    const busy = { maxActivePrefillTokens: 10, maxActiveBlocks: 1000 };
    expect(s.decide(input({ busy }), 0).chosen?.instance).not.toBe(d.chosen!.instance);
    s.book(s.decide(input({ busy, exclude: new Set([d.chosen!.instance]) }), 0), ns, {
      requestId: 'y',
      now: 0,
      speculativeTtlMs: 0,
    });
    s.book(s.decide(input({ busy }), 0), ns, { requestId: 'z', now: 0, speculativeTtlMs: 0 });
    expect(s.decide(input({ busy }), 0)).toMatchObject({ chosen: null, reason: 'all_busy' });
    expect(s.decide(input({ policy: 'direct', target: 'a', busy }), 0).chosen?.instance).toBe('a');
    expect(s.decide(input({ policy: 'direct', target: 'zz' }), 0)).toMatchObject({
      chosen: null,
      reason: 'unknown_target',
    });
    expect(s.decide(input({ exclude: new Set(['a', 'b', 'c']) }), 0).reason).toBe('no_candidates');
  });

  it('round-robin cycles, session sticks, least-loaded prefers idle workers', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(11));
    const rr = Array.from({ length: 6 }, () => s.decide(input({ policy: 'round-robin' }), 0).chosen!.instance);
    expect(rr).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
    const sticky = new Set(
      Array.from(
        { length: 20 },
        () => s.decide(input({ policy: 'session', sessionKey: 'user-42' }), 0).chosen!.instance,
      ),
    );
    expect(sticky.size).toBe(1);
    const spread = new Set(
      Array.from(
        { length: 40 },
        (_, i) => s.decide(input({ policy: 'session', sessionKey: `u${i}` }), 0).chosen!.instance,
      ),
    );
    expect(spread.size).toBe(3);
    s.book(s.decide(input({ policy: 'direct', target: 'a' }), 0), ns, { requestId: 'q1', now: 0, speculativeTtlMs: 0 });
    s.book(s.decide(input({ policy: 'direct', target: 'b' }), 0), ns, { requestId: 'q2', now: 0, speculativeTtlMs: 0 });
    expect(s.decide(input({ policy: 'least-loaded' }), 0).chosen!.instance).toBe('c');
  });
});

describe('rendezvous hashing (session, prefix co-location)', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const workers = Array.from({ length: 8 }, (_, i) => ({ instance: `w${i}`, dpRank: i % 2 }));
  const pick = (s: Scheduler, key: string, exclude?: Set<string>) =>
    s.decide(
      { ns, candidates: workers, tokens: [], policy: 'session', sessionKey: key, weights: W, temperature: 0, exclude },
      0,
    ).chosen!.instance;

  it('spreads keys evenly, and a worker leaving moves only the keys it had', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(3));
    const keys = Array.from({ length: 4000 }, (_, i) => `session-${i}`);
    const before = new Map(keys.map((k) => [k, pick(s, k)]));
    const counts = new Map<string, number>();
    for (const w of before.values()) counts.set(w, (counts.get(w) ?? 0) + 1);
    // 500 each on average; a binomial(4000, 1/8) stays within 420..580 with overwhelming probability.
    expect([...counts.values()].every((n) => n > 420 && n < 580)).toBe(true);
    expect(counts.size).toBe(8);
    const after = new Map(keys.map((k) => [k, pick(s, k, new Set(['w3']))]));
    for (const k of keys) if (before.get(k) !== 'w3') expect(after.get(k)).toBe(before.get(k));
    // The leaver's keys spread over the others, not onto one.
    expect(new Set(keys.filter((k) => before.get(k) === 'w3').map((k) => after.get(k))).size).toBe(7);
  });
});

describe('time cost model', () => {
  const T: CostWeights = {
    ...W,
    model: 'time',
    medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
    decodeInterference: 0.1,
  };

  it('prices queue, own prefill and decode stall in milliseconds', () => {
    // 6,600-token prompt, 6,000 cached on GPU (block 64: 93 full blocks = 5,952 tokens), 2,000 queued.
    const b = cost(
      { ...zero, device: 93, host: 93, disk: 93, activePrefillTokens: 2000, decodingRequests: 4 },
      6600,
      64,
      T,
      RATE,
    );
    expect(b.queueMs).toBeCloseTo(100, 9);
    expect(b.prefillMs).toBeCloseTo(20 + 648 * 0.05, 9);
    expect(b.ttftMs).toBeCloseTo(100 + 52.4, 9);
    expect(b.interferenceMs).toBeCloseTo(0.1 * 4 * (20 + 648 * 0.05), 9);
    expect(b.cost).toBeCloseTo(b.ttftMs + b.interferenceMs, 9);
  });

  it('keeps a long cached prefix where the block cost sheds it for a shorter batch', () => {
    // Warm: the prefix is cached, 20 decoding requests hold 1,500 blocks. Cold: idle.
    const warm = { ...zero, device: 93, host: 93, disk: 93, activeBlocks: 1500, decodingRequests: 20, newBlocks: 11 };
    const cold = { ...zero, newBlocks: 104 };
    const blocks = (c: typeof zero) => cost(c, 6600, 64, W, RATE).cost;
    const time = (c: typeof zero) => cost(c, 6600, 64, T, RATE).cost;
    expect(blocks(warm)).toBeGreaterThan(blocks(cold));
    expect(time(warm)).toBeLessThan(time(cold));
  });

  it('credits host-tier blocks as transfer time saved against recompute', () => {
    const gpu = cost({ ...zero, device: 10, host: 10, disk: 10 }, 640, 64, T, RATE);
    const cpu = cost({ ...zero, host: 10, disk: 10 }, 640, 64, T, RATE);
    const none = cost(zero, 640, 64, T, RATE);
    // 0.75 credit: a host block costs a quarter of recomputing it.
    expect(cpu.prefillMs - gpu.prefillMs).toBeCloseTo(0.25 * (none.prefillMs - gpu.prefillMs), 9);
  });
});

describe('PrefillRates', () => {
  it("stays at the prior without data and learns a worker's speed from first-token times", async () => {
    const { PrefillRates } = await import('../../src/scheduler/rates.js');
    const r = new PrefillRates();
    const prior = { tokensPerS: 20_000, overheadMs: 20 };
    expect(r.rate('a', 0, prior)).toEqual({
      msPerToken: 0.05,
      overheadMs: 20,
      msPerDecoding: 0,
      msPerAttention: 0,
      msPerDecodingContext: 0,
    });
    // Worker a truly does 10 ms + 0.01 ms/token (100k tokens/s).
    const rand = seeded(2);
    for (let i = 0; i < 400; i++) {
      const x = Math.floor(rand() * 20_000);
      r.observe('a', 0, x, 0, 10 + 0.01 * x + (rand() - 0.5) * 4, 'm');
    }
    const a = r.rate('a', 0, prior, 'm');
    expect(a.msPerToken).toBeGreaterThan(0.009);
    expect(a.msPerToken).toBeLessThan(0.012);
    expect(a.overheadMs).toBeGreaterThan(5);
    expect(a.overheadMs).toBeLessThan(15);
    // Another pool's workers keep the prior; garbage is ignored; a dropped worker forgets.
    expect(r.rate('b', 0, prior, 'z')).toEqual({
      msPerToken: 0.05,
      overheadMs: 20,
      msPerDecoding: 0,
      msPerAttention: 0,
      msPerDecodingContext: 0,
    });
    r.observe('b', 0, Number.NaN, 0, 5);
    r.observe('b', 0, 100, 0, -1);
    expect(r.snapshot(prior).map((s) => s.instance)).toEqual(['a']);
    r.drop('a');
    expect(r.rate('a', 0, prior, 'z')).toEqual({
      msPerToken: 0.05,
      overheadMs: 20,
      msPerDecoding: 0,
      msPerAttention: 0,
      msPerDecodingContext: 0,
    });
  });

  it('learns what each decoding request adds to a first token, apart from the prefill work', async () => {
    const { PrefillRates } = await import('../../src/scheduler/rates.js');
    const r = new PrefillRates();
    const prior = { tokensPerS: 20_000, overheadMs: 20 };
    const rand = seeded(5);
    // Truth: 15 ms + 0.02 ms/token + 0.8 ms per decoding request (a busier batch makes longer passes).
    for (let i = 0; i < 400; i++) {
      const x = Math.floor(rand() * 8000);
      const dec = Math.floor(rand() * 40);
      r.observe('a', 0, x, dec, 15 + 0.02 * x + 0.8 * dec + (rand() - 0.5) * 2);
    }
    const a = r.rate('a', 0, prior);
    expect(a.msPerDecoding).toBeGreaterThan(0.7);
    expect(a.msPerDecoding).toBeLessThan(0.9);
    expect(a.msPerToken).toBeGreaterThan(0.018);
    expect(a.msPerToken).toBeLessThan(0.022);
    expect(a.overheadMs).toBeGreaterThan(12);
    expect(a.overheadMs).toBeLessThan(18);
  });

  it('one wild sample barely moves a learned rate, and bounds hold', async () => {
    const { PrefillRates } = await import('../../src/scheduler/rates.js');
    const r = new PrefillRates();
    const prior = { tokensPerS: 20_000, overheadMs: 20 };
    r.observe('a', 0, 1000, 0, 1_000_000);
    expect(r.rate('a', 0, prior).msPerToken).toBeLessThanOrEqual(0.05 * 20);
  });

  it('the scheduler learns from prefill completions that carry a time, not from those without', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(4));
    // What replica sync publishes: every freed booking's sample, the same ones the scheduler learned.
    const published: Array<RateSample | undefined> = [];
    s.addHooks({ freed: (_id, rate) => published.push(rate) });
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, i) => salt * 100_000 + i + 1);
    const base: RouteInput = {
      ns,
      candidates: [{ instance: 'a', dpRank: 0 }],
      tokens: tokens(400, 0),
      policy: 'kv',
      weights: { ...W, model: 'time' },
      temperature: 0,
    };
    // The worker really does 5 ms + 0.002 ms per token (500k tokens/s), on prompts of 200-8,000 tokens.
    for (let i = 0; i < 50; i++) {
      const n = 200 + ((i * 797) % 7800);
      s.book(s.decide({ ...base, tokens: tokens(n, i + 1) }, i * 1000), ns, {
        requestId: `r${i}`,
        now: i * 1000,
        speculativeTtlMs: 0,
      });
      s.prefillComplete(`r${i}`, i * 1000 + 5 + 0.002 * n);
      s.free(`r${i}`);
    }
    s.book(s.decide(base, 0), ns, { requestId: 'late', now: 0, speculativeTtlMs: 0 });
    s.prefillComplete('late'); // a gateway's report: no timing
    s.free('late');
    // A first token "before" the booking (the clock stepped back) teaches nothing, here or to replicas.
    s.book(s.decide(base, 5000), ns, { requestId: 'back', now: 5000, speculativeTtlMs: 0 });
    s.prefillComplete('back', 4990);
    s.free('back');
    expect(s.rates.snapshot()[0].samples).toBe(50);
    expect(published).toHaveLength(52);
    expect(published.slice(50)).toEqual([undefined, undefined]);
    const replica = new PrefillRates();
    for (const r of published.slice(0, 50)) replica.observe('a', 0, r!.workTokens, r!.decoding, r!.ttftMs, r!.pool);
    expect(replica.rate('a', 0, undefined, 'm')).toEqual(s.rates.rate('a', 0, undefined, 'm'));
    const d = s.decide(base, 0);
    expect(d.chosen!.ttftMs).toBeLessThan(10);
    expect(d.chosen!.tokensPerS).toBeGreaterThan(20_000);
  });
});

describe('prefix co-location', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const cands = ['a', 'b', 'c', 'd'].map((instance) => ({ instance, dpRank: 0 }));
  const T: CostWeights = { ...W, model: 'time', decodeInterference: 0 };
  const prompt = (group: number, q: number) => [
    ...Array.from({ length: 64 }, (_, i) => group * 1000 + i + 1),
    ...Array.from({ length: 8 }, (_, i) => 900_000 + q * 10 + i),
  ];
  const route = (s: Scheduler, tokens: number[], prefixAffinity: number, now: number) =>
    s.decide(
      { ns, candidates: cands, tokens, policy: 'kv', weights: T, temperature: 0, prefixAffinity, affinityBlocks: 4 },
      now,
    );

  it('siblings of a new prefix meet on one instance without any speculative insert or event', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(6));
    for (let g = 0; g < 8; g++) {
      const picks = new Set<string>();
      for (let q = 0; q < 6; q++) {
        const d = route(s, prompt(g, q), 0.5, 0);
        picks.add(d.chosen!.instance);
        s.book(d, ns, { requestId: `g${g}q${q}`, now: 0, speculativeTtlMs: 0 });
        s.prefillComplete(`g${g}q${q}`);
      }
      expect(picks.size).toBe(1);
    }
    // Without affinity the same siblings scatter to the least-loaded instance each time.
    const plain = new Scheduler(new TieredIndexer(), seeded(6));
    const picks = new Set<string>();
    for (let q = 0; q < 6; q++) {
      const d = route(plain, prompt(0, q), 0, 0);
      picks.add(d.chosen!.instance);
      plain.book(d, ns, { requestId: `q${q}`, now: 0, speculativeTtlMs: 0 });
    }
    expect(picks.size).toBeGreaterThan(1);
  });

  it('load stays bounded: a preferred instance with a queue beyond the slack is passed over', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(8));
    const first = route(s, prompt(1, 0), 0.5, 0).chosen!.instance;
    // Queue 10,000 un-prefilled tokens there (500 ms at the prior): far beyond half a 72-token prefill.
    s.active.book('hog', first, 0, new BigUint64Array(0), 10_000, 0);
    const next = route(s, prompt(1, 1), 0.5, 0).chosen!.instance;
    expect(next).not.toBe(first);
    // Every sibling now spills to the same second choice, not anywhere.
    expect(new Set(Array.from({ length: 5 }, (_, q) => route(s, prompt(1, q + 2), 0.5, 0).chosen!.instance))).toEqual(
      new Set([next]),
    );
  });

  it('never queues a prefix behind a prefill while an idle candidate is within the slack', () => {
    const s = new Scheduler(new TieredIndexer(), seeded(8));
    const first = route(s, prompt(2, 0), 0.5, 0).chosen!.instance;
    // 4 queued tokens (0.2 ms at the prior): well within half a 72-token prefill, so the slack alone
    // would keep the sibling there; it goes to an instance with nothing queued instead.
    s.active.book('small', first, 0, new BigUint64Array(0), 4, 0);
    const picks = new Set(Array.from({ length: 6 }, (_, q) => route(s, prompt(2, q + 1), 0.5, 0).chosen!.instance));
    expect(picks.has(first)).toBe(false);
    expect(picks.size).toBe(1);
    // With the queue everywhere, the preferred instance is back in.
    for (const inst of ['a', 'b', 'c', 'd'])
      if (inst !== first) s.active.book(`q-${inst}`, inst, 0, new BigUint64Array(0), 4, 0);
    expect(route(s, prompt(2, 1), 0.5, 0).chosen!.instance).toBe(first);
  });

  it('never trades a longer cached prefix for affinity', () => {
    const indexer = new TieredIndexer();
    const s = new Scheduler(indexer, seeded(10));
    const p = prompt(3, 0);
    const seq = seqHashes(p, 4, hashSpace());
    const idx = indexer.namespace(ns).index;
    for (const inst of ['a', 'b', 'c', 'd']) {
      const holder = idx.holder(inst, 0, 'GPU');
      idx.store(holder, seq.subarray(0, 16));
      idx.clearHolder(holder);
      idx.store(idx.holder(inst, 0, 'GPU'), seq.subarray(0, inst === 'c' ? 16 : 15));
    }
    for (let i = 0; i < 10; i++) expect(route(s, prompt(3, i), 100, 0).chosen!.instance).toBe('c');
  });
});

describe('bounded load', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const cands = ['a', 'b', 'c', 'd'].map((instance) => ({ instance, dpRank: 0 }));
  const T: CostWeights = { ...W, model: 'time', decodeInterference: 0 };
  // A 40-block system prompt everyone shares, then each conversation's own tokens.
  const sys = Array.from({ length: 160 }, (_, i) => i + 1);
  const convo = (u: number, len: number) => [...sys, ...Array.from({ length: len }, (_, i) => 100_000 * (u + 1) + i)];
  const route = (s: Scheduler, tokens: number[], loadBound: number) =>
    s.decide({ ns, candidates: cands, tokens, policy: 'kv', weights: T, temperature: 0, loadBound }, 0).chosen!
      .instance;
  let n = 0;
  const fill = (s: Scheduler, inst: string, count: number) => {
    for (let i = 0; i < count; i++) s.active.book(`r${n++}`, inst, 0, new BigUint64Array(0), 0, 0);
  };
  /** a, b and c hold the system prompt; a also holds conversation 0's 1,600-token history. */
  function setup(): Scheduler {
    const indexer = new TieredIndexer();
    const idx = indexer.namespace(ns).index;
    const space = indexer.spaceFor(ns);
    for (const inst of ['a', 'b', 'c']) idx.store(idx.holder(inst, 0, 'GPU'), seqHashes(sys, 4, space));
    idx.store(idx.holder('a', 0, 'GPU'), seqHashes(convo(0, 1600), 4, space));
    return new Scheduler(indexer, seeded(3));
  }

  it("a new conversation leaves the popular prefix's holders once they reach the bound", () => {
    const s = setup();
    fill(s, 'a', 3);
    fill(s, 'b', 2);
    fill(s, 'c', 2);
    fill(s, 'd', 2);
    // cap = 1.25 x (9 + 1) / 4 = 3.125: a (3 + 1) would exceed it; b and c, the cheapest, would not.
    for (let u = 1; u < 20; u++) expect(['b', 'c']).toContain(route(s, convo(u, 160), 1.25));
    // Without the bound a ties with b and c (no queue anywhere) and takes its share.
    expect(new Set(Array.from({ length: 40 }, (_, u) => route(s, convo(u + 1, 160), 0)))).toEqual(
      new Set(['a', 'b', 'c']),
    );
    fill(s, 'a', 2);
    fill(s, 'b', 3);
    fill(s, 'c', 3);
    // a, b, c hold 5 each, d 2: cap = 1.25 x 18 / 4 = 5.6. Every holder would exceed it; the system
    // prompt saves 8 of d's 36 ms of prefill (20 ms overhead + 320 tokens): less than half, so d takes it.
    expect(route(s, convo(9, 160), 1.25)).toBe('d');
    expect(route(s, convo(9, 160), 0)).not.toBe('d');
  });

  it('leaves a prefix nobody holds to co-location, even on a full instance', () => {
    const s = setup();
    fill(s, 'a', 3);
    const fresh = (k: number) => Array.from({ length: 64 }, (_, i) => 5_000_000 + k * 1000 + i);
    const withAffinity = (tokens: number[], loadBound: number) =>
      s.decide(
        {
          ns,
          candidates: cands,
          tokens,
          policy: 'kv',
          weights: T,
          temperature: 0,
          loadBound,
          prefixAffinity: 0.5,
          affinityBlocks: 4,
        },
        0,
      ).chosen!.instance;
    // a is over its cap (1.25 x 4 / 4), yet new prefixes hash to it as they would without the bound.
    const picks = Array.from({ length: 40 }, (_, k) => withAffinity(fresh(k), 1.25));
    expect(picks).toEqual(Array.from({ length: 40 }, (_, k) => withAffinity(fresh(k), 0)));
    expect(picks).toContain('a');
  });

  it('never moves a conversation away from its own history', () => {
    const s = setup();
    fill(s, 'a', 6);
    fill(s, 'b', 1);
    fill(s, 'c', 1);
    // a holds 6 of 8 in flight (cap ceil(1.25 x 9 / 4) = 3), but conversation 0's history there
    // saves 80 of b's 100 ms of prefill.
    expect(route(s, [...convo(0, 1600), 1, 2, 3, 4], 1.25)).toBe('a');
    // A cap of 1 x mean changes nothing for it either, and a factor of 0 is off.
    expect(route(s, [...convo(0, 1600), 1, 2, 3, 4], 1)).toBe('a');
  });
});

describe('rate samples', () => {
  it('take the prompt tokens the engine reports it computed over the predicted ones', () => {
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const tokens = Array.from({ length: 4000 }, (_, i) => i + 1);
    const input: RouteInput = {
      ns,
      candidates: [{ instance: 'a', dpRank: 0 }],
      tokens,
      policy: 'kv',
      weights: { ...W, model: 'time' },
      temperature: 0,
    };
    // Predicted: 4,000 uncached tokens each. The engine found 3,600 cached: it computed 400, in 10 ms.
    const learn = (report: boolean) => {
      const s = new Scheduler(new TieredIndexer(), seeded(12));
      for (let i = 0; i < 30; i++) {
        s.book(s.decide(input, 0), ns, { requestId: `r${i}`, now: i * 100, speculativeTtlMs: 0 });
        s.prefillComplete(`r${i}`, i * 100 + 10);
        if (report) s.reportUncached(`r${i}`, 400);
        s.free(`r${i}`);
      }
      expect(s.rates.snapshot()[0].samples).toBe(30);
      return s.rates.rate('a', 0).msPerToken;
    };
    // Taking the prediction, 4,000 tokens in 10 ms: a rate ten times too fast.
    expect(learn(true)).toBeGreaterThan(3 * learn(false));
  });
});

describe('rate samples: context', () => {
  it("carry the attention work of the prefill queued ahead and of its own (as the engine reported it), and the decoding requests' context", () => {
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const s = new Scheduler(new TieredIndexer(), seeded(3));
    const published: Array<RateSample | undefined> = [];
    s.addHooks({ freed: (_id, rate) => published.push(rate) });
    const route = (n: number, salt: number): RouteInput => ({
      ns,
      candidates: [{ instance: 'a', dpRank: 0 }],
      tokens: Array.from({ length: n }, (_, i) => salt * 100_000 + i + 1),
      policy: 'kv',
      weights: { ...W, model: 'time' },
      temperature: 0,
    });
    // d (1,000 tokens) decodes; q (2,000) waits; r (4,000) is booked behind q and computes 400 (3,600 cached).
    s.book(s.decide(route(1000, 1), 0), ns, { requestId: 'd', now: 0, speculativeTtlMs: 0 });
    s.prefillComplete('d', 50);
    s.book(s.decide(route(2000, 2), 60), ns, { requestId: 'q', now: 60, speculativeTtlMs: 0 });
    s.book(s.decide(route(4000, 3), 70), ns, { requestId: 'r', now: 70, speculativeTtlMs: 0 });
    // q, the queue head, has run 10 ms of its 100 (2,000 tokens at the prior's 0.05 ms, nothing ahead
    // of it): r queues behind the other 90 %.
    expect(s.active.get('r')).toMatchObject({
      aheadTokens: 1800,
      aheadAttention: 0.9 * 2000 * 1000,
      decodingAhead: 1,
    });
    // The cost prices r's queue with q's attention (the pool learned nothing yet: the flat prior's 0).
    expect(s.active.load('a', 0)).toMatchObject({ activeAttention: 2000 * 1000 + 4000 * 2000, decodingContext: 1000 });
    s.prefillComplete('r', 170);
    s.reportUncached('r', 400);
    s.free('r');
    expect(published.at(-1)).toEqual({
      workTokens: 1800 + 400,
      attentionWork: 0.9 * 2000 * 1000 + 400 * (3600 + 200),
      decoding: 1,
      decodingContext: 1000,
      ttftMs: 100,
      pool: 'm',
    });
  });
});

describe('pooled rates', () => {
  it('an instance without data starts from what its pool showed, not from the configured guess', async () => {
    const { PrefillRates } = await import('../../src/scheduler/rates.js');
    const r = new PrefillRates();
    const prior = { tokensPerS: 20_000, overheadMs: 20 };
    const rand = seeded(9);
    // e0 and e1 of model m are fast (0.01 ms/token); e2 has never served a request.
    for (let i = 0; i < 200; i++) {
      const x = Math.floor(rand() * 8000);
      r.observe(i % 2 ? 'e0' : 'e1', 0, x, 0, 10 + 0.01 * x, 'm');
    }
    expect(r.rate('e2', 0, prior, 'm').msPerToken).toBeLessThan(0.012);
    // Another model's instances keep the prior.
    expect(r.rate('x0', 0, prior, 'other').msPerToken).toBe(0.05);
  });

  it('a cold instance is predicted like its warm peers from the first samples on', async () => {
    const { PrefillRates } = await import('../../src/scheduler/rates.js');
    const r = new PrefillRates();
    const prior = { tokensPerS: 20_000, overheadMs: 20 };
    // Six first tokens each on e0 and e1 (engine-sim's speed: 16.5 ms + 0.017 ms/token), new
    // conversations (3,100 tokens) and follow-up turns (250) mixed, some behind decoding requests.
    for (let i = 0; i < 12; i++) {
      const x = i % 3 === 0 ? 3100 : 250;
      r.observe(i % 2 ? 'e0' : 'e1', 0, x, i % 4, 16.5 + 0.017 * x + 2 * (i % 4), 'm');
    }
    const at = (inst: string, tokens: number) => {
      const q = r.rate(inst, 0, prior, 'm');
      return q.overheadMs + tokens * q.msPerToken;
    };
    const warm = (at('e0', 3100) + at('e1', 3100)) / 2;
    // The configured guess would say 175 ms for e2: a greedy cost would never send it a prefill.
    expect(Math.abs(at('e2', 3100) - warm) / warm).toBeLessThan(0.05);
  });
});

describe('decode_block_ms', () => {
  it('adds the decode memory the instance would hold, in ms, only when set', () => {
    const T: CostWeights = { ...W, model: 'time', decodeInterference: 0 };
    const c = { ...zero, activeBlocks: 1000, newBlocks: 10 };
    expect(cost(c, 640, 64, T, RATE).cost).toBeCloseTo(20 + 640 * 0.05, 9);
    expect(cost(c, 640, 64, { ...T, decodeBlockMs: 0.05 }, RATE).cost).toBeCloseTo(20 + 640 * 0.05 + 0.05 * 1010, 9);
    expect(cost(c, 640, 64, { ...T, decodeBlockMs: 0.05, trackActiveBlocks: false }, RATE).cost).toBeCloseTo(
      20 + 640 * 0.05,
      9,
    );
  });
});
