// kv's pick reads each eligible candidate's in-flight requests and queued prefill from the scorer's
// columns (PickLoads: by position, compacted to the eligible ones), not from each candidate's Load.
// Against the pick reading the Loads: random fleets (bookings queued and decoding, cached prefixes,
// busy candidates filtered out, load bound, co-location, saturation re-pricing, new sessions), the
// scheduler's choice equals the pick without the columns over the same eligible list and draws.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { policySpec } from '../../src/scheduler/policies/registry.js';
import type { PolicyContext } from '../../src/scheduler/policies/types.js';
import { type CandidateScore, type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_NS, PICK_TIME_WEIGHTS } from '../helpers/scheduling.js';
import { SCORE_FIELDS } from '../helpers/score-fields.js';

const ns = PICK_NS;
const candidates = Array.from({ length: 16 }, (_, w) => ({ instance: `w${w >> 1}`, dpRank: w & 1 }));

function scenario(seed: number): { decisions: number; fast: number } {
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  const space = indexer.spaceFor(ns);
  const prompts = Array.from({ length: 6 }, (_, p) =>
    Array.from({ length: 40 + 40 * p }, (_, i) => (i < 40 ? i : p * 1000 + i)),
  );
  let draw = mulberry32(0);
  const s = new Scheduler(indexer, () => draw());
  const spec = policySpec('kv');
  let live: string[] = [];
  let n = 0;
  let decisions = 0;
  let fast = 0;
  for (let step = 0; step < 80; step++) {
    // (Caches and load mostly on a few candidates: the load bound binds on the holders.)
    const c = candidates[rnd() < 0.6 ? int(4) : int(candidates.length)];
    const r = rnd();
    if (r < 0.2) idx.store(idx.holder(c.instance, c.dpRank, 'GPU'), seqHashes(prompts[int(prompts.length)], 4, space));
    else if (r < 0.6) {
      const id = `b${n++}`;
      s.active.book(id, c.instance, c.dpRank, new BigUint64Array(0), rnd() < 0.3 ? 0 : int(3000), step, 'm', int(200));
      live.push(id);
    } else if (r < 0.75 && live.length > 0) s.active.prefillComplete(live[int(live.length)]);
    else if (live.length > 0) {
      const k = int(live.length);
      s.active.free(live[k]);
      live = live.filter((_, j) => j !== k);
    }
    // (Now and then another list: a subset in another order, as a gateway's subset hint makes.)
    const list = rnd() < 0.3 ? candidates.filter(() => rnd() < 0.7).reverse() : candidates;
    const input: RouteInput = {
      ns,
      candidates: list,
      tokens: prompts[int(prompts.length)],
      policy: 'kv',
      weights: PICK_TIME_WEIGHTS,
      temperature: 0,
      busy: rnd() < 0.5 ? { maxActivePrefillTokens: 2000, maxActiveBlocks: 1e9 } : null,
      loadBound: rnd() < 0.8 ? 1.25 : 0,
      loadBoundNewSession: rnd() < 0.5,
      sessionKey: rnd() < 0.5 ? `s${int(4)}` : null,
      prefixAffinity: 0.5,
      affinityAny: rnd() < 0.5,
      recomputeWeightSaturated: rnd() < 0.7 ? 1 : 0,
    };
    const drawSeed = seed * 1000 + step;
    // The decision carrying the chosen score alone (kv's pick over the columns, no score per
    // candidate), then the one carrying every score, over the same state and draws: the same choice.
    draw = mulberry32(drawSeed);
    const lone = s.decide({ ...input, scores: 'decision' }, step);
    draw = mulberry32(drawSeed);
    const d = s.decide(input, step);
    expect(lone.reason).toBe(d.reason);
    expect(lone.scored).toBe(list.length);
    expect(lone.memo).toBe(d.memo);
    if (lone.candidates.length < d.candidates.length) {
      expect(lone.candidates).toEqual([lone.chosen]);
      fast++;
    }
    if (d.chosen === null) expect(lone.chosen).toBeNull();
    else {
      expect(lone.chosen).not.toBeNull();
      for (const key of SCORE_FIELDS) expect([key, lone.chosen![key]]).toEqual([key, d.chosen[key]]);
    }
    if (d.reason !== null) continue;
    // The pick over the same eligible list, reading each candidate's Load, with the same draws.
    const eligible = input.busy ? d.candidates.filter((x) => !x.busy) : d.candidates;
    const ctx = {
      temperature: 0,
      rand: mulberry32(drawSeed),
      nextTurn: () => 0,
      sessionKey: input.sessionKey ?? null,
      target: null,
      prefixAffinity: 0.5,
      affinityBlocks: 4,
      affinityAny: input.affinityAny ?? false,
      loadBound: input.loadBound ?? 0,
      loadBoundUnique: false,
      loadBoundNewSession: input.loadBoundNewSession ?? false,
      recomputeWeightSaturated: input.recomputeWeightSaturated ?? 0,
      seq: d.seq,
      tokens: input.tokens ?? null,
      isl: d.isl,
      ns,
      text: null,
      now: step,
      state: { sessions: new Set<string>() },
      memo: null,
      loads: null,
    } satisfies PolicyContext;
    expect(d.chosen).toBe(eligible[spec.pick(eligible, ctx)]);
    decisions++;
  }
  return { decisions, fast };
}

describe("kv's pick over the scorer's load columns", () => {
  it('chooses as the pick reading each candidate load does, with or without a score per candidate', () => {
    let decisions = 0;
    let fast = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const r = scenario(seed);
      decisions += r.decisions;
      fast += r.fast;
    }
    expect(decisions).toBeGreaterThan(2000);
    // (Most decisions without a busy candidate went without the other scores.)
    expect(fast).toBeGreaterThan(1000);
  });
});
