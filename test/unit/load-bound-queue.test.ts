// routing.load_bound: over the bound, the pick keeps a request whose move would make it wait for the
// prefill queued on the candidate within the bound (the bound counts requests; a few long prompts
// queued there are more work than many short ones on the pick). Worked at the rate prior (0.05 ms a
// token, 20 ms overhead), 4-token blocks, a 2,000-token prompt whose first 400 tokens a holds:
//   a: prefill 20 + 1,600 x 0.05 = 100 ms, nothing queued (5 requests in flight, none prefilling);
//   b: 120 ms cold, 4 in flight, nothing queued;
//   c, d: 120 ms cold, 1 in flight each, 4,000 prefill tokens queued = 200 ms.
// cap = 1.25 x (11 + 1) / 4 = 3.75: a and b are over it. The cheapest within it is c or d (320 ms).
//   a's cache saves 120 - 100 = 20 ms < 0.5 x 120: without the queue, c or d took the request
//   (a first token at 320 ms instead of 100); with c's 200 ms ahead: 120 + 200 - 100 = 220 >= 60: a keeps it.
// With c and d holding their request but nothing queued, the bound still moves it there (120 ms, 0 ahead).
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_CANDIDATES, PICK_NS, PICK_TIME_WEIGHTS } from '../helpers/scheduling.js';

const ns = PICK_NS;
const prompt = Array.from({ length: 2000 }, (_, i) => i + 1);

function setup(seed: number, queuedOnCd: number): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  idx.store(idx.holder('a', 0, 'GPU'), seqHashes(prompt.slice(0, 400), 4, indexer.spaceFor(ns)));
  const s = new Scheduler(indexer, mulberry32(seed));
  const none = new BigUint64Array(0);
  let n = 0;
  for (const [inst, count] of [
    ['a', 5],
    ['b', 4],
  ] as const)
    for (let i = 0; i < count; i++) s.active.book(`r${n++}`, inst, 0, none, 0, 0);
  s.active.book('qc', 'c', 0, none, queuedOnCd, 0);
  s.active.book('qd', 'd', 0, none, queuedOnCd, 0);
  return s;
}

const route = (s: Scheduler, scores: 'all' | 'decision' = 'all') =>
  s.decide(
    {
      scores,
      ns,
      candidates: PICK_CANDIDATES,
      tokens: prompt,
      policy: 'kv',
      weights: PICK_TIME_WEIGHTS,
      temperature: 0,
      loadBound: 1.25,
    },
    0,
  );

describe('load_bound and the queue of the candidate within it', () => {
  it('keeps the request on the pick rather than queue it behind long prompts', () => {
    for (let seed = 1; seed <= 12; seed++) {
      const d = route(setup(seed, 4000));
      const cost = Object.fromEntries(d.candidates.map((c) => [c.instance, c.cost]));
      expect(cost.a).toBeCloseTo(100, 6);
      expect(cost.c).toBeCloseTo(320, 6);
      expect(d.chosen!.instance).toBe('a');
      // The same pick over the scorer's columns alone (no score object for the others: their queue from the column).
      const lone = route(setup(seed, 4000), 'decision');
      expect(lone.candidates).toEqual([lone.chosen]);
      expect(lone.chosen!.instance).toBe('a');
    }
  });

  it('still moves it to a candidate within the bound with nothing queued', () => {
    for (let seed = 1; seed <= 12; seed++) {
      expect(['c', 'd']).toContain(route(setup(seed, 0)).chosen!.instance);
      expect(['c', 'd']).toContain(route(setup(seed, 0), 'decision').chosen!.instance);
    }
  });
});
