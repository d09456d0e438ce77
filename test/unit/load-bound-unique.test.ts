// routing.load_bound_unique: bounded load judges an over-bound candidate by the cached prefix only it
// holds. The example is the agentic scenario's first turn (leaderboard decision log): a 4,000-token
// system prompt every session shares, then a 1,000-token task. Worked at the rate prior (20,000
// tokens/s = 0.05 ms a token, 20 ms overhead), nothing queued:
//   holders of the system prompt (a, b): prefill 20 + 1,000 x 0.05 =  70 ms
//   cold instances (c, d):               prefill 20 + 5,000 x 0.05 = 270 ms
// In flight a 5, b 4, c 1, d 0: cap = 1.25 x (10 + 1) / 4 = 3.44, so a and b are over it.
//   off: the pick (a or b) saves 270 - 70 = 200 >= 0.5 x 270 of c's prefill: it keeps the session;
//   on:  the cheapest within the bound (c or d) has no prefill queued, and the next best candidate
//        (the other holder) computes 70 ms too: 70 - 70 = 0 < 0.5 x 70, so c or d takes it.
// A later turn (system + task + 1,000 history + 500 new = 6,500 tokens, a holds 6,000) keeps its
// history either way: a 20 + 500 x 0.05 = 45 ms, b (the system prompt) 20 + 2,500 x 0.05 = 145:
// 145 - 45 = 100 >= 0.5 x 145.
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
const span = (base: number, len: number) => Array.from({ length: len }, (_, i) => base + i);
const firstTurn = (u: number) => [...sys, ...span(1_000_000 * (u + 1), 1000)];
const history = [...firstTurn(0), ...span(50_000_000, 1000)];

/** `holders` hold the system prompt, a also conversation 0's history; in flight a 5, b 4, c 1, d 0. */
function setup(holders: string[]): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  const space = indexer.spaceFor(ns);
  for (const inst of holders) idx.store(idx.holder(inst, 0, 'GPU'), seqHashes(sys, 4, space));
  idx.store(idx.holder('a', 0, 'GPU'), seqHashes(history, 4, space));
  const s = new Scheduler(indexer, mulberry32(7));
  let n = 0;
  for (const [inst, count] of [
    ['a', 5],
    ['b', 4],
    ['c', 1],
  ] as const)
    for (let i = 0; i < count; i++) s.active.book(`r${n++}`, inst, 0, new BigUint64Array(0), 0, 0);
  return s;
}

const route = (s: Scheduler, tokens: number[], unique: boolean) =>
  s.decide(
    {
      ns,
      candidates: cands,
      tokens,
      policy: 'kv',
      weights: T,
      temperature: 0,
      loadBound: 1.25,
      loadBoundUnique: unique,
    },
    0,
  );

describe('load_bound_unique', () => {
  it('the worked example: prefill per candidate as computed by hand', () => {
    const d = route(setup(['a', 'b']), firstTurn(1), false);
    const ms = Object.fromEntries(d.candidates.map((c) => [c.instance, c.prefillMs]));
    expect(ms.a).toBeCloseTo(70, 6);
    expect(ms.b).toBeCloseTo(70, 6);
    expect(ms.c).toBeCloseTo(270, 6);
    expect(ms.d).toBeCloseTo(270, 6);
  });

  it('a new session leaves the loaded holders of a system prompt two instances hold', () => {
    for (let u = 1; u <= 12; u++) {
      const s = setup(['a', 'b']);
      expect(['a', 'b']).toContain(route(s, firstTurn(u), false).chosen!.instance);
      expect(['c', 'd']).toContain(route(s, firstTurn(u), true).chosen!.instance);
    }
  });

  it('only for an idle instance: one with prefill queued is no cheaper place to recompute it', () => {
    const s = setup(['a', 'b']);
    // c and d each get 100 tokens of prefill queued (in flight a 5, b 4, c 2, d 1: cap 1.25 x 13 / 4 = 4.06):
    // the rule falls back to the plain bound, and the holders' 200 ms saving keeps the session.
    s.active.book('qc', 'c', 0, new BigUint64Array(0), 100, 0);
    s.active.book('qd', 'd', 0, new BigUint64Array(0), 100, 0);
    for (let u = 1; u <= 6; u++) expect(['a', 'b']).toContain(route(s, firstTurn(u), true).chosen!.instance);
  });

  it('a prefix one instance alone holds still keeps the request', () => {
    // Only a holds the system prompt: its saving is its own (270 - 70 >= 0.5 x 270).
    expect(route(setup(['a']), firstTurn(1), true).chosen!.instance).toBe('a');
    // A conversation's history stays where it is: 145 - 45 >= 0.5 x 145.
    const s = setup(['a', 'b']);
    const next = [...history, ...span(60_000_000, 500)];
    const d = route(s, next, true);
    const ms = Object.fromEntries(d.candidates.map((c) => [c.instance, c.prefillMs]));
    expect(ms.a).toBeCloseTo(45, 6);
    expect(ms.b).toBeCloseTo(145, 6);
    expect(d.chosen!.instance).toBe('a');
  });
});
