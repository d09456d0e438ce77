// routing.load_bound_new_session: bounded load judges a request opening a session (a session key the
// router has not booked before) as load_bound_unique does, and every other request by the plain rule.
// The example is load-bound-unique.test.ts's, worked at the rate prior (0.05 ms a token, 20 ms
// overhead), nothing queued: a 4,000-token system prompt held by a and b, then a 1,000-token task.
//   a, b (holders): prefill 20 + 1,000 x 0.05 = 70 ms; c, d (cold): 20 + 5,000 x 0.05 = 270 ms.
// In flight a 5, b 4, c 1, d 0: cap = 1.25 x (10 + 1) / 4 = 3.44, so a and b are over it.
//   session "s1", first request: unique rule, the other holder computes 70 ms too: 0 < 0.5 x 70,
//     so c or d (within the bound) takes it.
//   the same prompt without a session key, or under a key an earlier request of the app was booked
//     with (two-tenant's one-shot requests): plain rule, 270 - 70 = 200 >= 0.5 x 270: a or b keeps it.
// After "s1" is booked on c (c 2 in flight, cap 1.25 x 12 / 4 = 3.75), "s1" is no longer new: plain rule.
// A lone holder (only a holds the system prompt) no longer keeps a session's first request either: over the
// bound, a candidate within it that has no prefill queued takes it on.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_CANDIDATES, PICK_NS, PICK_TIME_WEIGHTS } from '../helpers/scheduling.js';

const ns = PICK_NS;
const cands = PICK_CANDIDATES;
const T = PICK_TIME_WEIGHTS;
const sys = Array.from({ length: 4000 }, (_, i) => i + 1);
const firstTurn = (u: number) => [...sys, ...Array.from({ length: 1000 }, (_, i) => 1_000_000 * (u + 1) + i)];

/** `holders` hold the system prompt; in flight a 5, b 4, c 1, d 0. */
function setup(seed: number, holders = ['a', 'b']): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  const space = indexer.spaceFor(ns);
  for (const inst of holders) idx.store(idx.holder(inst, 0, 'GPU'), seqHashes(sys, 4, space));
  const s = new Scheduler(indexer, mulberry32(seed));
  let n = 0;
  for (const [inst, count] of [
    ['a', 5],
    ['b', 4],
    ['c', 1],
  ] as const)
    for (let i = 0; i < count; i++) s.active.book(`r${n++}`, inst, 0, new BigUint64Array(0), 0, 0);
  return s;
}

const route = (s: Scheduler, tokens: number[], sessionKey: string | null, newSession = true) =>
  s.decide(
    {
      ns,
      candidates: cands,
      tokens,
      sessionKey,
      policy: 'kv',
      weights: T,
      temperature: 0,
      loadBound: 1.25,
      loadBoundNewSession: newSession,
    },
    0,
  );

describe('load_bound_new_session', () => {
  it("a session's first request leaves the loaded holders of a system prompt two instances hold", () => {
    for (let seed = 1; seed <= 12; seed++) {
      const s = setup(seed);
      const d = route(s, firstTurn(seed), `s${seed}`);
      const ms = Object.fromEntries(d.candidates.map((c) => [c.instance, c.prefillMs]));
      expect(ms.a).toBeCloseTo(70, 6);
      expect(ms.c).toBeCloseTo(270, 6);
      expect(['c', 'd']).toContain(d.chosen!.instance);
      // Off, the plain rule keeps it on a holder.
      expect(['a', 'b']).toContain(route(setup(seed), firstTurn(seed), `s${seed}`, false).chosen!.instance);
    }
  });

  it('a request without a session key, or under a key already booked, keeps the plain rule', () => {
    for (let seed = 1; seed <= 12; seed++) {
      const s = setup(seed);
      expect(['a', 'b']).toContain(route(s, firstTurn(seed), null).chosen!.instance);
      const first = route(s, firstTurn(seed), 'app1');
      expect(['c', 'd']).toContain(first.chosen!.instance);
      s.book(first, ns, { requestId: 'first', now: 0, speculativeTtlMs: 0 });
      // The app's next one-shot request (another prompt, the same key) is no new session.
      expect(['a', 'b']).toContain(route(s, firstTurn(seed + 100), 'app1').chosen!.instance);
      // A new key still is.
      expect(['c', 'd']).toContain(route(s, firstTurn(seed + 200), 'app2').chosen!.instance);
    }
  });

  it("a lone holder of the system prompt does not keep a session's first request while c or d has no prefill queued", () => {
    // Only a holds it (b is cold like c, d: 270 ms): the prefix a alone holds saves 270 - 70 = 200 ms, more
    // than half of the next best candidate's 270, which kept every new session on a lone holder; d, with
    // nothing in flight, is the cheapest within the bound and has no prefill queued: it takes it on.
    for (let seed = 1; seed <= 12; seed++) {
      const d = route(setup(seed, ['a']), firstTurn(seed), `s${seed}`);
      expect(Object.fromEntries(d.candidates.map((c) => [c.instance, c.prefillMs])).b).toBeCloseTo(270, 6);
      expect(['c', 'd']).toContain(d.chosen!.instance);
      // Without a session key (the plain rule) a keeps it.
      expect(route(setup(seed, ['a']), firstTurn(seed), null).chosen!.instance).toBe('a');
    }
  });
});
