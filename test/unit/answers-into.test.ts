// The scheduler has the index walk's overlaps (overlapsFor) and the in-flight held prefixes
// (HeldPrefixes.ofIds) written into buffers it reuses every decision, not a new array per decision.
// Whatever an earlier query left in the buffer (a longer list, other holders), each answer equals
// the one made into a new array, for random holders, prompts, candidate lists and allocations.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { seqHashes } from '../../src/hashing/index.js';
import type { CandidateOverlaps } from '../../src/indexer/block-index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';
import { PICK_NS } from '../helpers/scheduling.js';

const ns = PICK_NS;
const fleet = Array.from({ length: 24 }, (_, w) => ({ instance: `w${w >> 1}`, dpRank: w & 1 }));
const prompts = Array.from({ length: 6 }, (_, p) =>
  Array.from({ length: 40 + 24 * p }, (_, i) => (i < 24 ? i : p * 1000 + i)),
);

/** An answer's columns as plain arrays (a view into a larger buffer compares by its elements alone). */
const plain = (o: CandidateOverlaps) => ({
  device: Array.from(o.device),
  host: Array.from(o.host),
  disk: Array.from(o.disk),
  surviving: Array.from(o.surviving),
  shared: o.shared,
});

describe('answers into a reused buffer', () => {
  it('overlapsFor and ofIds answer into the buffer as into a new array', () => {
    const rnd = mulberry32(11);
    const int = (n: number) => Math.floor(rnd() * n);
    const indexer = new TieredIndexer();
    const idx = indexer.namespace(ns).index;
    const space = indexer.spaceFor(ns);
    const seqs = prompts.map((p) => seqHashes(p, 4, space));
    const active = new ActiveSequences();
    const overlapBuf = new Int32Array(4 * fleet.length);
    const heldBuf = new Int32Array(fleet.length);
    let nonzero = 0;
    let heldNonzero = 0;
    const unheld = seqHashes(
      Array.from({ length: 64 }, (_, i) => 900_000 + i),
      4,
      space,
    );
    for (let step = 0; step < 300; step++) {
      const c = fleet[int(fleet.length)];
      const seq = seqs[int(seqs.length)];
      const cut = 1 + int(seq.length);
      const r = rnd();
      const tier = r < 0.6 ? 'GPU' : r < 0.8 ? 'CPU' : 'DISK';
      if (r < 0.9) idx.store(idx.holder(c.instance, c.dpRank, tier), seq.subarray(0, cut));
      else idx.remove(idx.holder(c.instance, c.dpRank, 'GPU'), seq.subarray(cut - 1, cut));
      if (rnd() < 0.4) active.book(`b${step}`, c.instance, c.dpRank, seq.subarray(0, cut), int(300), step, 'm');
      // A random list (shorter lists leave the end of the buffer as the last longer one wrote it).
      const list = fleet.filter(() => rnd() < 0.6);
      const prompt = seqs[int(seqs.length)];
      const alloc = rnd() < 0.5 ? Int32Array.from(list, () => (rnd() < 0.5 ? int(40) : 0)) : undefined;
      const fresh = idx.overlapsFor(prompt, step, list, alloc);
      const into = idx.overlapsFor(prompt, step, list, alloc, overlapBuf);
      expect(plain(into)).toEqual(plain(fresh));
      for (const x of fresh.device) if (x > 0) nonzero++;
      const ids = active.idsOf(list);
      const held = active.heldPrefixes(prompt).ofIds(ids);
      // (A prompt nobody holds, after one held: the buffer holds the last answer's prefixes.)
      active.heldPrefixes(prompt).ofIds(ids, heldBuf);
      expect(Array.from(active.heldPrefixes(unheld).ofIds(ids, heldBuf).subarray(0, ids.length))).toEqual(
        Array.from(ids, () => 0),
      );
      for (const x of held) if (x > 0) heldNonzero++;
      expect(Array.from(active.heldPrefixes(prompt).ofIds(ids, heldBuf).subarray(0, ids.length))).toEqual(
        Array.from(held),
      );
    }
    // (The answers were not all nothing.)
    expect(nonzero).toBeGreaterThan(300);
    expect(heldNonzero).toBeGreaterThan(100);
  });
});
