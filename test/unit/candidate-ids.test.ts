// CandidateIds: a router's candidate list is resolved once; when its owner gives ids, only the
// candidates without one are looked up again (a fleet's index gives ids as engines publish their
// first events, for a thousand decisions); when it takes ids back, the whole list is.
import { describe, expect, it } from 'vitest';
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
});
