// The scorer prices 1,024 candidates a decision in one pass over typed columns, calling the cost
// model's arithmetic over plain numbers (costTerms); cost() is the same arithmetic over a CostInput.
// Routing must not move by a bit: against the cost model as it was written over objects (kept here
// verbatim), every term equals bit for bit (Object.is), over random inputs (queue heads early, late
// and overdue, decoding context, host/disk tiers, the shared pool, both models, every optional
// weight), and every score of random fleets (bookings queued and decoding, learned rates, cached
// prefixes on GPU, host, disk and a shared pool) carries the columns' terms of those same numbers;
// the pass over all candidates at once (a decision carrying the chosen score alone) chooses as the
// candidates priced one at a time do.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import {
  attentionWork,
  type CostBreakdown,
  type CostInput,
  type CostWeights,
  cost,
  type MediumWeights,
  type PrefillRate,
  type QueueHead,
} from '../../src/scheduler/cost.js';
import { DEFAULT_RATE_PRIOR } from '../../src/scheduler/rates.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';
import { SCORE_FIELDS } from '../helpers/score-fields.js';

// ---- the cost model over objects, as it was before costTerms (the reference; do not "simplify")

function refHeadMs(h: QueueHead, rate: PrefillRate): number {
  return h.prefillTokens * rate.msPerToken + h.attention * rate.msPerAttention;
}

function refHeadProgressMs(h: QueueHead, rate: PrefillRate): number {
  const start = h.aheadTokens * rate.msPerToken + h.aheadAttention * rate.msPerAttention;
  const ran = h.elapsedMs - start;
  return Math.max(0, Math.min(ran, 2 * refHeadMs(h, rate) - ran));
}

function refRange(from: number, to: number, w: number, shared: number, sharedW: number): number {
  if (to <= from) return 0;
  const inShared = Math.max(0, Math.min(to, shared) - from);
  return inShared * Math.max(w, sharedW) + (to - from - inShared) * w;
}

function refCredited(c: Pick<CostInput, 'device' | 'host' | 'disk' | 'shared'>, m: MediumWeights): number {
  const host = Math.max(c.host, c.device);
  const disk = Math.max(c.disk, host);
  return (
    c.device +
    refRange(c.device, host, m.cpu, c.shared, m.shared) +
    refRange(host, disk, m.disk, c.shared, m.shared) +
    Math.max(0, c.shared - disk) * m.shared
  );
}

function refCost(c: CostInput, isl: number, blockSize: number, w: CostWeights, rate: PrefillRate): CostBreakdown {
  const credited = refCredited(c, w.medium);
  const uncached = Math.max(isl - credited * blockSize, 0);
  const prefillBlocks = (c.activePrefillTokens + uncached) / blockSize;
  const decodeBlocks = w.trackActiveBlocks ? c.activeBlocks + c.newBlocks : 0;
  const progressMs = c.head ? refHeadProgressMs(c.head, rate) : 0;
  const queueMs =
    Math.max(0, c.activePrefillTokens * rate.msPerToken + (c.activeAttention ?? 0) * rate.msPerAttention - progressMs) +
    c.decodingRequests * rate.msPerDecoding +
    (c.decodingContext ?? 0) * rate.msPerDecodingContext;
  const ownMs = uncached * rate.msPerToken + attentionWork(uncached, isl - uncached) * rate.msPerAttention;
  const prefillMs = rate.overheadMs + ownMs;
  const interferenceMs = w.trackActiveBlocks ? w.decodeInterference * c.decodingRequests * prefillMs : 0;
  const ttftMs = queueMs + prefillMs;
  const decodeMs = w.trackActiveBlocks && w.decodeBlockMs ? w.decodeBlockMs * (c.activeBlocks + c.newBlocks) : 0;
  const recomputeMs = (w.recomputeWeight ?? 0) * ownMs;
  const value =
    w.model === 'time'
      ? ttftMs + interferenceMs + decodeMs + recomputeMs
      : w.overlapWeight * prefillBlocks + decodeBlocks;
  const headDone = progressMs > 0 ? progressMs / refHeadMs(c.head!, rate) : 0;
  return {
    creditedBlocks: credited,
    prefillBlocks,
    decodeBlocks,
    queueMs,
    prefillMs,
    ttftMs,
    interferenceMs,
    headDone,
    cost: value,
  };
}

// ----

const TERMS: Array<keyof CostBreakdown> = [
  'creditedBlocks',
  'prefillBlocks',
  'decodeBlocks',
  'queueMs',
  'prefillMs',
  'ttftMs',
  'interferenceMs',
  'headDone',
  'cost',
];

/** Bit for bit (Object.is: -0 and NaN too), each term named in a failure. */
function expectSame(got: Record<string, unknown>, want: CostBreakdown, keys = TERMS): void {
  for (const key of keys)
    expect([key, Object.is(got[key], want[key]) ? want[key] : got[key]]).toEqual([key, want[key]]);
}

function randomWeights(rnd: () => number): CostWeights {
  const frac = () => (rnd() < 0.2 ? 0 : rnd() < 0.2 ? 1 : rnd());
  return {
    model: rnd() < 0.75 ? 'time' : 'blocks',
    overlapWeight: rnd() < 0.5 ? 1 : rnd() * 3,
    medium: { cpu: frac(), disk: frac(), shared: frac() },
    trackActiveBlocks: rnd() < 0.8,
    decodeInterference: rnd() < 0.3 ? 0 : rnd(),
    ...(rnd() < 0.5 ? { decodeBlockMs: rnd() < 0.3 ? 0 : rnd() * 0.1 } : {}),
    ...(rnd() < 0.5 ? { recomputeWeight: rnd() < 0.3 ? 0 : rnd() * 2 } : {}),
  };
}

function randomRate(rnd: () => number): PrefillRate {
  return {
    msPerToken: 0.01 + rnd() * 0.2,
    overheadMs: rnd() * 30,
    msPerDecoding: rnd() < 0.3 ? 0 : rnd() * 2,
    msPerAttention: rnd() < 0.3 ? 0 : rnd() * 1e-5,
    msPerDecodingContext: rnd() < 0.3 ? 0 : rnd() * 1e-4,
  };
}

describe('the cost model over plain numbers (costTerms)', () => {
  it('prices every input as the cost model over objects did, bit for bit', () => {
    const rnd = mulberry32(37);
    const int = (n: number) => Math.floor(rnd() * n);
    let heads = 0;
    let credited = 0;
    for (let i = 0; i < 10_000; i++) {
      const device = rnd() < 0.3 ? 0 : int(400);
      // Tiers cumulative or not (a lower tier may extend the prefix, or report less than the GPU).
      const host = rnd() < 0.4 ? device : int(500);
      const disk = rnd() < 0.4 ? host : int(600);
      const prefill = rnd() < 0.3 ? 0 : int(30_000) + (rnd() < 0.3 ? rnd() : 0);
      const head: QueueHead | null =
        prefill > 0 && rnd() < 0.7
          ? {
              elapsedMs: rnd() < 0.1 ? -rnd() * 50 : rnd() * 4000,
              aheadTokens: int(prefill),
              aheadAttention: rnd() * 1e7,
              prefillTokens: int(8000),
              attention: rnd() * 1e7,
            }
          : null;
      const c: CostInput = {
        device,
        host,
        disk,
        shared: rnd() < 0.5 ? 0 : int(700),
        activePrefillTokens: prefill,
        activeBlocks: int(4000),
        decodingRequests: int(40) + (rnd() < 0.2 ? rnd() : 0),
        head,
        newBlocks: int(2000),
        ...(rnd() < 0.8 ? { activeAttention: rnd() * 1e8 } : {}),
        ...(rnd() < 0.8 ? { decodingContext: int(200_000) } : {}),
      };
      const isl = rnd() < 0.1 ? 0 : int(40_000);
      const blockSize = [1, 4, 16, 64][int(4)];
      const w = randomWeights(rnd);
      const rate = randomRate(rnd);
      const want = refCost(c, isl, blockSize, w, rate);
      expectSame(cost(c, isl, blockSize, w, rate) as unknown as Record<string, unknown>, want);
      if (want.headDone > 0) heads++;
      if (want.creditedBlocks !== c.device) credited++;
    }
    // (The draws reach the head's progress and the lower tiers' and shared pool's credit.)
    expect(heads).toBeGreaterThan(800);
    expect(credited).toBeGreaterThan(2500);
  });

  it("prices a fleet's candidates in one pass as the cost model over objects does", () => {
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const candidates = Array.from({ length: 24 }, (_, w) => ({ instance: `w${w >> 1}`, dpRank: w & 1 }));
    const prompts = Array.from({ length: 6 }, (_, p) =>
      Array.from({ length: 40 + 60 * p }, (_, i) => (i < 40 ? i : p * 1000 + i)),
    );
    let scores = 0;
    let heads = 0;
    let lower = 0;
    let shared = 0;
    let distrusted = 0;
    for (let seed = 1; seed <= 8; seed++) {
      const rnd = mulberry32(seed);
      const int = (n: number) => Math.floor(rnd() * n);
      const indexer = new TieredIndexer();
      const idx = indexer.namespace(ns).index;
      idx.bindBackend('pool', null);
      const space = indexer.spaceFor(ns);
      let draw = mulberry32(seed);
      const s = new Scheduler(indexer, () => draw());
      let live: string[] = [];
      let n = 0;
      for (let step = 1; step <= 120; step++) {
        const c = candidates[int(candidates.length)];
        const r = rnd();
        const prompt = prompts[int(prompts.length)];
        const cut = 10 + int(prompt.length - 10);
        if (r < 0.2) {
          const medium = (['GPU', 'CPU', 'DISK'] as const)[int(3)];
          idx.store(idx.holder(c.instance, c.dpRank, medium), seqHashes(prompt.slice(0, cut), 4, space));
        } else if (r < 0.25) idx.store(idx.holder('pool', 0, 'DISK'), seqHashes(prompt.slice(0, cut), 4, space));
        else if (r < 0.55) {
          const id = `b${n++}`;
          const seq = seqHashes(prompt, 4, space);
          s.active.book(id, c.instance, c.dpRank, seq, rnd() < 0.2 ? 0 : int(3000), step - rnd() * 3, 'm', int(300));
          live.push(id);
        } else if (r < 0.7 && live.length > 0) s.active.prefillComplete(live[int(live.length)]);
        else if (r < 0.8)
          s.rates.observe(c.instance, c.dpRank, 200 + int(4000), int(8), 20 + rnd() * 400, 'm', {
            attentionWork: rnd() * 1e7,
            decodingContext: int(20_000),
          });
        else if (live.length > 0) {
          const k = int(live.length);
          s.active.free(live[k]);
          live = live.filter((_, j) => j !== k);
        }
        // (Now and then an instance distrusted, or trusted again: it competes on load alone.)
        if (rnd() < 0.1) {
          const who = candidates[int(candidates.length)].instance;
          if (!s.distrusted.delete(who)) s.distrusted.add(who);
        }
        const weights = randomWeights(rnd);
        const input: RouteInput = {
          ns,
          candidates,
          tokens: prompts[int(prompts.length)],
          policy: 'kv',
          weights,
          temperature: 0,
          evictionAware: rnd() < 0.5,
          loadBound: rnd() < 0.5 ? 1.25 : 0,
          prefixAffinity: rnd() < 0.5 ? 0.5 : 0,
        };
        const decidedAt = step + rnd();
        // The pass over every candidate (price(x, 0, n): the pick over its columns, one score made)
        // chooses as the pick over the scores priced one at a time, with the same draws.
        draw = mulberry32(seed * 1000 + step);
        const lone = s.decide({ ...input, scores: 'decision' }, decidedAt);
        draw = mulberry32(seed * 1000 + step);
        const d = s.decide(input, decidedAt);
        expect(lone.candidates.length).toBe(1);
        for (const key of SCORE_FIELDS) expect([key, lone.chosen![key]]).toEqual([key, d.chosen![key]]);
        for (const sc of d.candidates) {
          const load = sc.load;
          const h = load.activePrefillTokens > 0 ? s.active.queueHead(sc.instance, sc.dpRank) : undefined;
          const c: CostInput = {
            device: sc.device,
            host: sc.host,
            disk: sc.disk,
            shared: sc.shared,
            activePrefillTokens: load.activePrefillTokens,
            activeAttention: load.activeAttention,
            activeBlocks: load.activeBlocks,
            decodingRequests: load.decodingRequests,
            decodingContext: load.decodingContext,
            head: h
              ? {
                  elapsedMs: decidedAt - h.createdAt,
                  aheadTokens: h.aheadTokens,
                  aheadAttention: h.aheadAttention,
                  prefillTokens: h.prefillTokens,
                  attention: attentionWork(h.prefillTokens, h.contextTokens),
                }
              : null,
            newBlocks: sc.newBlocks,
          };
          const rate = s.rates.rate(sc.instance, sc.dpRank, DEFAULT_RATE_PRIOR, 'm');
          const want = refCost(c, d.isl, 4, weights, rate);
          expectSame(sc as unknown as Record<string, unknown>, want);
          scores++;
          if (want.headDone > 0) heads++;
          if (sc.host > sc.device || sc.disk > sc.device) lower++;
          if (sc.shared > 0) shared++;
          if (sc.distrusted) distrusted++;
        }
      }
    }
    expect(scores).toBeGreaterThan(15_000);
    expect(heads).toBeGreaterThan(500);
    expect(lower).toBeGreaterThan(500);
    expect(shared).toBeGreaterThan(500);
    expect(distrusted).toBeGreaterThan(500);
  });

  it("prices the engines' unbooked load and an adapter's as the scores' breakdown does", () => {
    // price() adds the unbooked load to the load columns in place; a score's getters add it through
    // costInput. With only the TTFT priced (no decode or recompute terms, no KV penalty), a score's
    // cost is its ttftMs to the bit: the two sums agree.
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const candidates = Array.from({ length: 16 }, (_, w) => ({ instance: `w${w >> 1}`, dpRank: w & 1 }));
    const prompt = Array.from({ length: 120 }, (_, i) => i);
    const weights: CostWeights = {
      model: 'time',
      overlapWeight: 1,
      medium: { cpu: 0.5, disk: 0.25, shared: 0.25 },
      trackActiveBlocks: false,
      decodeInterference: 0,
    };
    let unbooked = 0;
    let scores = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const rnd = mulberry32(seed);
      const int = (n: number) => Math.floor(rnd() * n);
      const indexer = new TieredIndexer();
      const idx = indexer.namespace(ns).index;
      const space = indexer.spaceFor(ns);
      const s = new Scheduler(indexer, mulberry32(seed));
      for (let step = 1; step <= 60; step++) {
        const c = candidates[int(candidates.length)];
        if (rnd() < 0.3)
          idx.store(idx.holder(c.instance, c.dpRank, 'GPU'), seqHashes(prompt.slice(0, 8 + int(100)), 4, space));
        else
          s.active.book(
            `b${seed}-${step}`,
            c.instance,
            c.dpRank,
            seqHashes(prompt, 4, space),
            int(3000),
            step,
            'm',
            int(300),
          );
        // (Learned rates: the unbooked attention and decoding requests are priced, not times 0.)
        s.rates.observe(c.instance, c.dpRank, 200 + int(4000), int(8), 20 + rnd() * 400, 'm', {
          attentionWork: rnd() * 1e7,
          decodingContext: int(20_000),
        });
        // (One answer per engine for the whole decision: the chosen one is priced twice.)
        const seen = candidates.map(() =>
          rnd() < 0.3 ? null : { running: int(6), waiting: int(6), kvUsage: null, at: step },
        );
        const input: RouteInput = {
          ns,
          candidates,
          tokens: prompt,
          policy: 'kv',
          weights,
          temperature: 0,
          engineLoad: (instance, dpRank) =>
            seen[candidates.findIndex((x) => x.instance === instance && x.dpRank === dpRank)],
          engineWeights: { waiting: 0.5 + rnd(), running: 0.5 + rnd(), kvUsageMs: 0 },
          ...(rnd() < 0.5 ? { adapter: 'a', adapterLoadMs: 40 + rnd() * 100 } : {}),
        };
        for (const sc of s.decide(input, step + rnd()).candidates) {
          expect([sc.instance, sc.dpRank, sc.cost]).toEqual([sc.instance, sc.dpRank, sc.ttftMs]);
          scores++;
          if (sc.unbookedRequests > 0) unbooked++;
        }
      }
    }
    expect(scores).toBe(4 * 60 * 16);
    expect(unbooked).toBeGreaterThan(1000);
  });
});
