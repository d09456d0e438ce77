// routing.recompute_weight_saturated (kv): while every candidate has prefill queued, w x a candidate's
// own predicted prefill is added to its cost; while one has none queued, the costs stay as scored.
// Worked at the rate prior (0.05 ms a token, 20 ms overhead), 4-token blocks, a 4,000-token prompt
// whose first 3,600 tokens a holds:
//   a (holder): queue 16,000 tokens = 800 ms, prefill 20 + 400 x 0.05 = 40 ms  -> 840 ms
//   b, c (cold): queue 12,000 tokens = 600 ms, prefill 20 + 4,000 x 0.05 = 220 ms -> 820 ms
// w = 0: b or c (820 < 840). w = 1: a 840 + 40 = 880 against b, c 820 + 220 = 1,040: a keeps it.
// With d beside them, nothing queued but 40 requests decoding (decode_interference 0.1: 220 + 0.1 x
// 40 x 220 = 1,100 ms), not every candidate queues: b or c, whatever w.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_CANDIDATES, PICK_NS, PICK_TIME_WEIGHTS } from '../helpers/scheduling.js';

const ns = PICK_NS;
const prompt = Array.from({ length: 4000 }, (_, i) => i + 1);

function setup(seed: number): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  idx.store(idx.holder('a', 0, 'GPU'), seqHashes(prompt.slice(0, 3600), 4, indexer.spaceFor(ns)));
  const s = new Scheduler(indexer, mulberry32(seed));
  const none = new BigUint64Array(0);
  s.active.book('qa', 'a', 0, none, 16_000, 0);
  s.active.book('qb', 'b', 0, none, 12_000, 0);
  s.active.book('qc', 'c', 0, none, 12_000, 0);
  for (let i = 0; i < 40; i++) {
    s.active.book(`d${i}`, 'd', 0, none, 0, 0);
    s.active.prefillComplete(`d${i}`);
  }
  return s;
}

const route = (s: Scheduler, w: number, withD: boolean) =>
  s.decide(
    {
      ns,
      candidates: withD ? PICK_CANDIDATES : PICK_CANDIDATES.slice(0, 3),
      tokens: prompt,
      policy: 'kv',
      weights: { ...PICK_TIME_WEIGHTS, decodeInterference: 0.1 },
      temperature: 0,
      recomputeWeightSaturated: w,
    },
    0,
  );

describe('recompute_weight_saturated', () => {
  it('keeps a request on the holder of its prefix once every candidate queues prefill', () => {
    for (let seed = 1; seed <= 12; seed++) {
      const off = route(setup(seed), 0, false);
      const cost = Object.fromEntries(off.candidates.map((c) => [c.instance, c.cost]));
      expect(cost.a).toBeCloseTo(840, 6);
      expect(cost.b).toBeCloseTo(820, 6);
      expect(['b', 'c']).toContain(off.chosen!.instance);
      const on = route(setup(seed), 1, false);
      expect(on.chosen!.instance).toBe('a');
      // The scheduler's candidates keep their scored costs (the term is the pick's).
      expect(on.candidates.find((c) => c.instance === 'a')!.cost).toBeCloseTo(840, 6);
    }
  });

  it('leaves the costs as scored while a candidate has no prefill queued', () => {
    for (let seed = 1; seed <= 12; seed++) {
      const d = route(setup(seed), 1, true);
      expect(d.candidates.find((c) => c.instance === 'd')!.cost).toBeCloseTo(1100, 6);
      expect(['b', 'c']).toContain(d.chosen!.instance);
    }
  });
});
