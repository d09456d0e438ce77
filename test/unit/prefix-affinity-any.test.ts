// routing.prefix_affinity_any: co-location's equals need only be within the slack. The example is the
// fleet-scale two-tenant scenario's batch prompt (leaderboard decision log): a 448-token instruction
// every batch prompt shares, held by one idle instance, then a 4,000-token document of its own.
// Worked at the rate prior (0.05 ms a token, 20 ms overhead), nothing queued anywhere:
//   a (holds the instruction): 20 + 4,000 x 0.05 = 220 ms;  b, c, d: 20 + 4,448 x 0.05 = 242.4 ms
//   slack = 0.5 x 220 = 110 ms: every instance is within it (242.4 <= 330).
// Off, only a credits the cheapest's prefix: every batch prompt goes to a (router replicas that see
// each other's bookings 5 ms late all send theirs there). On, the request's own blocks pick among
// the four. A prefix that saves more than the slack is never traded: with a 4,000-token instruction
// and a 448-token document, a costs 20 + 448 x 0.05 = 42.4 ms, the others 242.4 > 42.4 + 21.2.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_CANDIDATES, PICK_NS, PICK_TIME_WEIGHTS } from '../helpers/scheduling.js';

const ns = PICK_NS;
const cands = PICK_CANDIDATES;
const T = PICK_TIME_WEIGHTS;
const span = (base: number, len: number) => Array.from({ length: len }, (_, i) => base + i);

function setup(instruction: number[]): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  idx.store(idx.holder('a', 0, 'GPU'), seqHashes(instruction, 4, indexer.spaceFor(ns)));
  return new Scheduler(indexer, mulberry32(5));
}

const route = (s: Scheduler, tokens: number[], any: boolean) =>
  s.decide(
    {
      ns,
      candidates: cands,
      tokens,
      policy: 'kv',
      weights: T,
      temperature: 0,
      prefixAffinity: 0.5,
      affinityBlocks: 4,
      affinityAny: any,
    },
    0,
  );

describe('prefix_affinity_any', () => {
  const instruction = span(1, 448);
  const batch = (k: number) => [...instruction, ...span(1_000_000 * (k + 1), 4000)];

  it('the worked example: prefill per candidate as computed by hand', () => {
    const d = route(setup(instruction), batch(0), false);
    const ms = Object.fromEntries(d.candidates.map((c) => [c.instance, c.cost]));
    expect(ms.a).toBeCloseTo(220, 6);
    expect(ms.b).toBeCloseTo(242.4, 6);
  });

  it('spreads prompts whose shared prefix saves less than the slack by their own blocks', () => {
    const s = setup(instruction);
    const off = Array.from({ length: 24 }, (_, k) => route(s, batch(k), false).chosen!.instance);
    const on = Array.from({ length: 24 }, (_, k) => route(s, batch(k), true).chosen!.instance);
    expect(new Set(off)).toEqual(new Set(['a']));
    expect(new Set(on)).toEqual(new Set(['a', 'b', 'c', 'd']));
    // The same prompt goes to the same instance (replicas agree without seeing each other).
    expect(route(s, batch(3), true).chosen!.instance).toBe(on[3]);
  });

  it('never trades a prefix that saves more than the slack', () => {
    const long = span(1, 4000);
    const s = setup(long);
    for (let k = 0; k < 24; k++)
      expect(route(s, [...long, ...span(1_000_000 * (k + 1), 448)], true).chosen!.instance).toBe('a');
  });
});
