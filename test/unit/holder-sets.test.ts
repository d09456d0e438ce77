// A store on a crowded block (many holder records) asks its holder set (src/indexer/holder-sets.ts),
// not the block's list, whether the holder already holds the block and whether a booking of its
// instance does. The sets must never be stale: two indexes get the same writes, one with sets and
// one walking the lists; every write returns the same and both hold the same records after it.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import type { Medium } from '../../src/indexer/tiers.js';

const MEDIA: Medium[] = ['GPU', 'GPU', 'CPU'];

interface Sets {
  find(lo: number, hi: number): number;
}
const setsOf = (index: BlockIndex): Sets => (index as unknown as { crowd: Sets }).crowd;

/** How often a store or record write found a set. */
function countHits(index: BlockIndex): { hits: number } {
  const sets = setsOf(index);
  const find = sets.find.bind(sets);
  const n = { hits: 0 };
  sets.find = (lo, hi) => {
    const s = find(lo, hi);
    if (s >= 0) n.hits++;
    return s;
  };
  return n;
}

/** Finds no set: every store walks the lists. */
function withoutSets(index: BlockIndex): BlockIndex {
  setsOf(index).find = () => -1;
  return index;
}

/** Every holder's records (what a dump reads), by holder key. */
function contents(index: BlockIndex): unknown[] {
  return index
    .holderIds()
    .map((h) => [index.holderInfo(h), index.holderBlocks(h)])
    .sort((x, y) => JSON.stringify(x[0]).localeCompare(JSON.stringify(y[0])));
}

describe('holder sets of crowded blocks', () => {
  it('answer as the lists do after every store, booking, confirmation, removal, clear, purge and expiry', () => {
    for (let seed = 1; seed <= 3; seed++) {
      const rnd = mulberry32(seed);
      const a = new BlockIndex(64);
      const b = withoutSets(new BlockIndex(64));
      const hits = countHits(a);
      const prompt = new BigUint64Array(48).map((_, i) => BigInt(seed) * 1_000_003n + BigInt(i) * 0x9e3779b97f4a7c15n);
      const instances = Array.from({ length: 80 }, (_, i) => `i${i}`);
      let now = 0;
      for (let step = 0; step < 300; step++) {
        now += 1;
        const inst = instances[Math.floor(rnd() * instances.length)];
        const op = rnd();
        const out: unknown[] = [];
        for (const x of [a, b]) {
          const r2 = mulberry32(seed * 100_000 + step);
          const from = Math.floor(r2() * 20);
          const to = Math.min(prompt.length, from + 1 + Math.floor(r2() * 30));
          const medium = MEDIA[Math.floor(r2() * MEDIA.length)];
          const ttl = r2() < 0.5 ? 50 : 80;
          if (op < 0.4)
            out.push(
              x.store(
                x.holder(inst, 0, medium),
                prompt.subarray(from, to),
                null,
                0,
                from > 0 ? prompt[from - 1] : null,
              ),
            );
          else if (op < 0.7) out.push(x.speculate(inst, 0, prompt.subarray(0, to), ttl, now));
          else if (op < 0.82) out.push(x.remove(x.holder(inst, 0, medium), prompt.subarray(from, to)));
          else if (op < 0.85) out.push(x.clearHolder(x.holder(inst, 0, 'CPU')));
          else if (op < 0.88) out.push(x.removeInstance(inst));
          else if (op < 0.93) out.push(x.expire(now - 30));
          else
            out.push(
              x.withdrawSpeculative(inst, 0, prompt.subarray(0, to), { ttlMs: ttl, expiresAt: now + ttl - 1 }, now),
            );
        }
        expect(out[0]).toEqual(out[1]);
        expect(contents(a)).toEqual(contents(b));
        expect(a.query(prompt, now)).toEqual(b.query(prompt, now));
      }
      // The sets were used (the test exercises them, not only the lists).
      expect(hits.hits).toBeGreaterThan(500);
    }
  });
});
