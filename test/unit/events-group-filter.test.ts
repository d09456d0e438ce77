// The KV-cache group filter's memory is bounded (MAX_GROUPS kinds per publisher): a group it cannot
// remember is not indexed, because its BlockRemoved events (which carry no kind) would be skipped
// and its blocks would stay in the index after the engine evicted them.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { GroupFilter } from '../../src/events/decode/groups.js';

describe('GroupFilter beyond the groups it can remember', () => {
  it('skips a new sliding-window or full-attention group whose removals it could not classify', () => {
    const f = new GroupFilter();
    for (let r = 0; r < 4096; r++) expect(f.classifyStored(r, 1, 'sliding_window', 128, 16)).not.toBe('skip');
    // Rank 4096's groups come after the map is full.
    expect(f.classifyStored(4096, 1, 'sliding_window', 128, 16)).toBe('skip');
    expect(f.classifyRemoved(4096, 1)).toBe('skip');
    expect(f.classifyStored(4096, 2, 'full_attention', null, 16)).toBe('skip');
    expect(f.classifyRemoved(4096, 2)).toBe('skip');
    // Group 0 full attention is what unlabelled removals are read as: still indexed.
    expect(f.classifyStored(4096, 0, 'full_attention', null, 16)).toBe('main');
    expect(f.classifyRemoved(4096, 0)).toBe('main');
    // What it remembers is unchanged.
    expect(f.classifyStored(7, 1, 'sliding_window', 128, 16)).toEqual({
      idx: 1,
      kind: 'sliding_window',
      window: 128,
      blockSize: 16,
    });
    expect(f.classifyRemoved(7, 1)).toEqual({ idx: 1, kind: 'sliding_window', window: 128, blockSize: 16 });
  });
});

describe('GroupFilter: a repeated stored event answered from its memo', () => {
  it('answers every call as a filter without the memo does (random calls, kinds that change)', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const rnd = mulberry32(seed);
      const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)];
      const f = new GroupFilter();
      const ref = new GroupFilter();
      let args: Parameters<GroupFilter['classifyStored']> = [0, 0, 'full_attention', null, 16];
      let hits = 0;
      for (let step = 0; step < 400; step++) {
        if (rnd() < 0.2) {
          const dp = pick([0, 1]);
          const g = pick([null, 0, 1, 2]);
          expect(f.classifyRemoved(dp, g)).toEqual(ref.classifyRemoved(dp, g));
          continue;
        }
        // Mostly the same call again (what an engine's events are), else one argument changed.
        if (rnd() < 0.4) {
          const next = [...args] as typeof args;
          const at = Math.floor(rnd() * 5);
          if (at === 0) next[0] = pick([0, 1]);
          if (at === 1) next[1] = pick([null, 0, 1, 2]);
          if (at === 2) next[2] = pick([null, 'full_attention', 'mla_attention', 'sliding_window', 'mamba', 'chunked']);
          if (at === 3) next[3] = pick([null, 0, 64, 128]);
          if (at === 4) next[4] = pick([16, 32]);
          args = next;
        } else hits++;
        // The reference never repeats a call: an unlabelled one (which learns nothing) comes first.
        ref.classifyStored(0, null, null, null, 0);
        expect(f.classifyStored(...args), `seed ${seed} step ${step} ${JSON.stringify(args)}`).toEqual(
          ref.classifyStored(...args),
        );
      }
      expect(hits).toBeGreaterThan(100);
    }
  });
});
