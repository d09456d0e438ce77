// A candidate's GPU holder (the eviction judgement's: an alive, event-confirmed GPU holder counting for
// it) is kept by candidate id in typed arrays (src/indexer/holders.ts: gpuHolders, hLiveGpu), not read
// from the holders' objects. After random holder writes (GPU, CPU and speculative holders made, a
// backend purged and its id reused, backends bound to other instances or to the shared pool) the answer
// is always one that the objects' definition accepts, NONE only when no holder qualifies, and the same
// holder while it still qualifies.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { NONE } from '../../src/indexer/layout.js';
import type { Medium } from '../../src/indexer/tiers.js';

interface Internals {
  holders: Array<{ alive: boolean; speculative: boolean; medium: Medium }>;
  liveHolders: Set<number>;
  hCand: Int32Array;
  cands: Array<{ instance: string; dpRank: number }>;
  gpuHolderOf(cand: number): number;
}

/** The definition, read from the holders' objects. */
const qualifies = (x: Internals, h: number, cand: number): boolean => {
  const o = x.holders[h];
  return o !== undefined && o.alive && !o.speculative && o.medium === 'GPU' && x.hCand[h] === cand;
};

describe("a candidate's GPU holder by id", () => {
  it('is a holder the objects accept, NONE only when none does, kept while it qualifies', () => {
    const media: Medium[] = ['GPU', 'GPU', 'CPU', 'DISK'];
    for (let seed = 1; seed <= 6; seed++) {
      const rnd = mulberry32(seed);
      const index = new BlockIndex(64);
      const x = index as unknown as Internals;
      const backends = Array.from({ length: 12 }, (_, i) => `b${i}`);
      const instances = Array.from({ length: 8 }, (_, i) => `i${i}`);
      const seq = new BigUint64Array(4).map((_, i) => BigInt(seed * 1000 + i + 1));
      const last = new Map<number, number>();
      for (let step = 0; step < 400; step++) {
        const op = rnd();
        const b = backends[Math.floor(rnd() * backends.length)];
        const rank = Math.floor(rnd() * 2);
        if (op < 0.4) index.store(index.holder(b, rank, media[Math.floor(rnd() * media.length)]), seq);
        else if (op < 0.5)
          index.store(index.speculativeHolder(instances[Math.floor(rnd() * 8)], rank, 100), seq, null, 1e9);
        else if (op < 0.65) index.removeBackend(b, rnd() < 0.5 ? rank : undefined);
        else if (op < 0.72) index.removeInstance(instances[Math.floor(rnd() * 8)]);
        else if (op < 0.8) index.bindBackend(b, rnd() < 0.15 ? null : instances[Math.floor(rnd() * 8)]);
        for (let c = 0; c < x.cands.length; c++) {
          const h = x.gpuHolderOf(c);
          const any = [...x.liveHolders].some((i) => qualifies(x, i, c));
          if (h === NONE) expect(any).toBe(false);
          else expect(qualifies(x, h, c)).toBe(true);
          const before = last.get(c);
          if (before !== undefined && qualifies(x, before, c)) expect(h).toBe(before);
          last.set(c, h);
        }
      }
    }
  });
});
