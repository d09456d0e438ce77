// CandidateIds: a router's candidate list is resolved once; when its owner gives ids, only the
// candidates without one are looked up again (a fleet's index gives ids as engines publish their
// first events, for a thousand decisions); when it takes ids back, the whole list is. A frozen list
// of frozen candidates passed again is known by identity, without comparing it.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { CandidateIds } from '../../src/common/candidate-ids.js';

describe('CandidateIds', () => {
  it('looks up again only the candidates without an id when ids were given, all when one was taken back', () => {
    const known = new Map<string, number>([
      ['a', 0],
      ['c', 1],
    ]);
    let lookups = 0;
    const idOf = (instance: string, dpRank: number) => {
      lookups++;
      return dpRank === 0 ? (known.get(instance) ?? -1) : -1;
    };
    const list = ['a', 'b', 'c', 'd', 'e'].map((instance) => ({ instance, dpRank: 0 }));
    const ids = new CandidateIds();
    expect([...ids.of(list, 2, idOf)]).toEqual([0, -1, 1, -1, -1]);
    expect(lookups).toBe(5);
    expect([...ids.of(list, 2, idOf)]).toEqual([0, -1, 1, -1, -1]);
    expect(lookups).toBe(5); // the same list, nothing given: no lookup
    known.set('d', 2);
    expect([...ids.of(list, 3, idOf)]).toEqual([0, -1, 1, 2, -1]);
    expect(lookups).toBe(8); // b, d, e
    known.set('b', 3);
    known.set('e', 4);
    expect([...ids.of(list, 5, idOf)]).toEqual([0, 3, 1, 2, 4]);
    expect(lookups).toBe(10); // b, e
    expect([...ids.of(list, 6, idOf)]).toEqual([0, 3, 1, 2, 4]);
    expect(lookups).toBe(10); // nobody without an id
    // An id taken back and given to another: every candidate again.
    known.delete('c');
    known.set('a', 1);
    expect([...ids.of(list, 7, idOf, 1)]).toEqual([1, 3, -1, 2, 4]);
    expect(lookups).toBe(15);
    // Another list: every candidate.
    expect([...ids.of(list.slice(1), 7, idOf, 1)]).toEqual([3, -1, 2, 4]);
    expect(lookups).toBe(19);
  });

  it('returns the same array only while its ids are the same (IndexWalk keeps its wanted marks by it)', () => {
    const known = new Map<string, number>([['a', 0]]);
    const idOf = (instance: string) => known.get(instance) ?? -1;
    const list = ['a', 'b'].map((instance) => ({ instance, dpRank: 0 }));
    const ids = new CandidateIds();
    const first = ids.of(list, 1, idOf);
    expect(ids.of(list, 2, idOf)).toBe(first); // an id given elsewhere: this list's ids unchanged
    known.set('b', 1);
    const second = ids.of(list, 3, idOf);
    expect(second).not.toBe(first);
    expect([...first]).toEqual([0, -1]); // the array a caller kept still says what it said
    expect([...second]).toEqual([0, 1]);
    expect(ids.of(list, 3, idOf)).toBe(second);
  });

  it('knows a frozen list by identity; a list changed in place is compared (same answers as a lookup each time)', () => {
    for (let seed = 1; seed <= 5; seed++) {
      const rnd = mulberry32(seed);
      const names = Array.from({ length: 12 }, (_, i) => `i${i}`);
      const known = new Map<string, number>();
      let version = 0;
      let taken = 0;
      const idOf = (instance: string, dpRank: number) => known.get(`${instance}/${dpRank}`) ?? -1;
      // Reads of the frozen list's candidates (its comparison): none when it is passed again.
      let reads = 0;
      const counted = (instance: string, dpRank: number) =>
        Object.freeze({
          get instance() {
            reads++;
            return instance;
          },
          dpRank,
        });
      const frozen = Object.freeze(names.slice(0, 8).map((n, i) => counted(n, i % 2)));
      const mutable = names.slice(0, 8).map((instance, i) => ({ instance, dpRank: i % 2 }));
      const ids = new CandidateIds();
      let last: unknown = null;
      let lastTaken = 0;
      for (let step = 0; step < 300; step++) {
        const op = rnd();
        if (op < 0.15) {
          // An id given (a candidate that had one gets another: the old one taken back).
          const key = `${names[Math.floor(rnd() * names.length)]}/${Math.floor(rnd() * 2)}`;
          if (known.has(key)) taken++;
          known.set(key, known.size + 100 * step);
          version++;
        } else if (op < 0.2) {
          known.delete([...known.keys()][Math.floor(rnd() * known.size)]);
          taken++;
        } else if (op < 0.3) mutable[Math.floor(rnd() * 8)].instance = names[Math.floor(rnd() * names.length)];
        else if (op < 0.35) mutable[Math.floor(rnd() * 8)] = { instance: names[Math.floor(rnd() * 12)], dpRank: 1 };
        const r = rnd();
        const list = r < 0.5 ? frozen : r < 0.8 ? mutable : mutable.slice(0, 1 + Math.floor(rnd() * 8));
        const before = reads;
        const got = ids.of(list, version, idOf, taken);
        expect([...got]).toEqual(list.map((c) => idOf(c.instance, c.dpRank)));
        // Passed again with no id taken back: only the check above read it.
        if (list === frozen && last === frozen && taken === lastTaken) expect(reads - before).toBe(list.length);
        last = list;
        lastTaken = taken;
      }
    }
  });
});
