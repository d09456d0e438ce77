// The walk reads a hot block's records (one with many holders) from a contiguous copy
// (src/indexer/hot-blocks.ts). The copy must never be stale: every write that makes, frees or
// moves a record of the block changes the copy with the list (it is kept, not dropped: a fleet's
// block 0 changes at every booking). Two indexes get the same writes; one walks with its copies,
// the other always through the lists; after every write both answer alike, and each copy holds
// its block's list, row for row.
import { describe, expect, it } from 'vitest';
import { expectCopiesAreLists } from '../helpers/hot-copies.js';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex, DUMP_LAYOUT } from '../../src/indexer/block-index.js';
import { HB } from '../../src/indexer/hot-blocks.js';
import { NONE } from '../../src/indexer/layout.js';
import { RECORD_LAYOUT } from '../../src/indexer/records.js';
import { WALK_LAYOUT } from '../../src/indexer/walk.js';
import { WRITES_LAYOUT } from '../../src/indexer/writes.js';
import type { Medium } from '../../src/indexer/tiers.js';

const MEDIA: Medium[] = ['GPU', 'GPU', 'CPU', 'DISK'];

/** How often the index's walk read a copy (it asks a copy's size only when it found one). */
function countHits(index: BlockIndex): { hits: number } {
  const hot = (index as unknown as { hot: { size(e: number): number } }).hot;
  const size = hot.size.bind(hot);
  const n = { hits: 0 };
  hot.size = (e) => {
    n.hits++;
    return size(e);
  };
  return n;
}

/** Walks through the lists only: its copies are never found. */
function withoutCopies(index: BlockIndex): BlockIndex {
  (index as unknown as { hot: { find(): number } }).hot.find = () => -1;
  return index;
}

describe('hot-block copies', () => {
  it('answer as the lists do after every store, re-store, removal, clear, purge and expiry', () => {
    for (let seed = 1; seed <= 4; seed++) {
      const rnd = mulberry32(seed);
      const a = new BlockIndex(64);
      const b = withoutCopies(new BlockIndex(64));
      const hits = countHits(a);
      const prompt = new BigUint64Array(96).map((_, i) => BigInt(seed) * 1_000_003n + BigInt(i) * 0x9e3779b97f4a7c15n);
      const instances = Array.from({ length: 72 }, (_, i) => `i${i}`);
      let now = 0;
      let copies = 0;
      for (let step = 0; step < 250; step++) {
        now += 1;
        const inst = instances[Math.floor(rnd() * instances.length)];
        const op = rnd();
        for (const x of [a, b]) {
          const r2 = mulberry32(seed * 100_000 + step);
          if (op < 0.45) {
            // A chain from block 0, or a continuation naming its parent (same run or a new one).
            const medium = MEDIA[Math.floor(r2() * MEDIA.length)];
            const from = op < 0.15 ? 0 : 1 + Math.floor(r2() * 40);
            const to = Math.min(prompt.length, from + 1 + Math.floor(r2() * 60));
            x.store(x.holder(inst, 0, medium), prompt.subarray(from, to), null, 0, from > 0 ? prompt[from - 1] : null);
          } else if (op < 0.5) {
            x.store(x.speculativeHolder(inst, 0, 50), prompt.subarray(0, 1 + Math.floor(r2() * 50)), null, now + 50);
          } else if (op < 0.6) {
            const at = Math.floor(r2() * 30);
            x.remove(x.holder(inst, 0, 'GPU'), prompt.subarray(at, at + 1 + Math.floor(r2() * 4)));
          } else if (op < 0.63) x.clearHolder(x.holder(inst, 0, 'CPU'));
          else if (op < 0.65) x.removeInstance(inst);
          else if (op < 0.7) x.expire(now - 20);
          // else: nothing changes, the next query reads the copy
        }
        copies += expectCopiesAreLists(a);
        expect(a.query(prompt, now)).toEqual(b.query(prompt, now));
        const cands = instances.map((instance) => ({ instance, dpRank: 0 }));
        const alloc = Int32Array.from(cands, (_, i) => (i % 3 === 0 ? 5 : 0));
        expect(a.overlapsFor(prompt, now, cands, alloc)).toEqual(b.overlapsFor(prompt, now, cands, alloc));
        // A booking's touch right after the walk finds the instance's records in the copies the walk
        // made (findRecordOf); the LRU estimate then reads what it wrote.
        const touched = instances[Math.floor(rnd() * instances.length)];
        const depth = 1 + Math.floor(rnd() * 60);
        for (const x of [a, b]) x.touch(touched, 0, prompt, depth);
        // Both got the same writes, so the same record ids: every row and clock must agree.
        const rows = (x: BlockIndex) =>
          x as unknown as { rec: Int32Array; recTouch: Float64Array; runTouchEnd: Int32Array };
        expect(rows(a).recTouch).toEqual(rows(b).recTouch);
        expect(rows(a).rec).toEqual(rows(b).rec);
        expect(rows(a).runTouchEnd).toEqual(rows(b).runTouchEnd);
        for (const inst of instances.slice(0, 24))
          for (const allocations of [3, 20, 60])
            expect(a.survivingPrefix(inst, 0, prompt, 80, allocations), `${inst} ${allocations}`).toBe(
              b.survivingPrefix(inst, 0, prompt, 80, allocations),
            );
      }
      // The copies were used and checked (the test exercises them, not only the lists).
      expect(hits.hits).toBeGreaterThan(20);
      expect(copies).toBeGreaterThan(100);
    }
  });
  it('follow each write to the block: removal, new holder, speculative insert, clear, purge, expiry, re-store', () => {
    const a = new BlockIndex(64);
    const b = withoutCopies(new BlockIndex(64));
    const hits = countHits(a);
    const prompt = new BigUint64Array(64).map((_, i) => 0x1234_5678_9abcn * BigInt(i + 1));
    const writes: Array<(x: BlockIndex) => unknown> = [];
    for (let i = 0; i < 40; i++)
      writes.push((x) => x.store(x.holder(`i${i}`, 0, i % 4 === 3 ? 'CPU' : 'GPU'), prompt.subarray(0, 8 + i)));
    writes.push((x) => x.store(x.speculativeHolder('i1', 0, 10), prompt.subarray(0, 50), null, 10));
    // The same booking's blocks again, later: the records stay, their expiry moves.
    writes.push((x) => x.store(x.speculativeHolder('i1', 0, 10), prompt.subarray(0, 20), null, 20));
    writes.push((x) => x.remove(x.holder('i5', 0, 'GPU'), prompt.subarray(0, 1)));
    writes.push((x) => x.store(x.holder('new', 0, 'GPU'), prompt.subarray(0, 30)));
    writes.push((x) => x.store(x.holder('i7', 0, 'GPU'), prompt.subarray(0, 3)));
    writes.push((x) => x.clearHolder(x.holder('i9', 0, 'GPU')));
    writes.push((x) => x.removeInstance('i11'));
    writes.push((x) => x.expire(10));
    for (const w of writes) {
      w(a);
      w(b);
      // Twice: the copy made by the first walk is kept through the writes, and read by both.
      for (let k = 0; k < 2; k++) expect(a.query(prompt, 0)).toEqual(b.query(prompt, 0));
      expectCopiesAreLists(a);
    }
    // Block 0's copy is made once (at the 32nd holder) and read from then on, whatever the writes.
    expect(hits.hits).toBeGreaterThanOrEqual(2 * (writes.length - 31) - 1);
  });
});

describe('row layouts', () => {
  it("every module's copy of the row offsets is the records' layout", () => {
    for (const copy of [WALK_LAYOUT, WRITES_LAYOUT, DUMP_LAYOUT])
      for (const [k, v] of Object.entries(copy))
        expect([k, v]).toEqual([k, RECORD_LAYOUT[k as keyof typeof RECORD_LAYOUT]]);
    expect(NONE).toBe(-1);
  });
});
