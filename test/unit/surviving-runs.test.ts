// survivingPrefix judges a run whose keys it knows (one store wrote it, touches reached a prefix of
// it, nothing left it but from its end) in O(1) from the keys' formula, instead of block by block.
// It must answer exactly as the block-by-block definition below (the loop records.ts ran before),
// on GPU caches filled the way engines fill them: whole chains, chains continued in pieces, chains
// stored again from the middle, touches of prefixes (longer, shorter, at one clock or later),
// evictions of the deepest blocks and of blocks anywhere.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import type { U64Table } from '../../src/indexer/u64-table.js';

const NONE = -1;
const R = 8;
const R_HOLDER = 2;
const R_NEXT_E = 3;
const T = 4;
const T_HEAD = 3;

interface Internals {
  table: U64Table;
  rec: Int32Array;
  recTouch: Float64Array;
  holders: Array<{ clock: number; peak: number; count: number; evicted: number }>;
  gpuHolder(instance: string, dpRank: number): number;
}

/** The definition: each prefix block's record of the holder, judged by the blocks allocated since its key. */
function reference(
  index: BlockIndex,
  instance: string,
  seq: BigUint64Array,
  depth: number,
  allocations: number,
): number {
  const x = index as unknown as Internals;
  const id = x.gpuHolder(instance, 0);
  const h = id === NONE ? null : x.holders[id];
  if (!h || h.evicted === 0 || depth <= 0) return depth;
  const need = allocations - (h.peak - h.count);
  if (need <= 0) return depth;
  const sv = new Int32Array(seq.buffer, seq.byteOffset, seq.length * 2);
  for (let i = 0; i < Math.min(depth, seq.length); i++) {
    const slot = x.table.find(sv[2 * i], sv[2 * i + 1]);
    let r = NONE;
    if (slot !== NONE)
      for (let y = x.table.data[slot * T + T_HEAD]; y !== NONE; y = x.rec[y * R + R_NEXT_E])
        if (x.rec[y * R + R_HOLDER] === id) r = y;
    if (r === NONE) continue;
    const newer = Math.max(0, Math.floor(h.clock - x.recTouch[r]));
    if (h.count - 1 - newer < need) return i;
  }
  return depth;
}

const MASK = (1n << 64n) - 1n;

function scenario(seed: number): { compared: number; cut: number } {
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  let nodes = 0;
  const hash = () => (BigInt(++nodes) * 0x9e3779b97f4a7c15n) & MASK;
  // Prompts are paths of a tree: each branches off an earlier one (often at its end: a next turn).
  const prompts: bigint[][] = [];
  /** Where each prompt leaves the one it branched off. */
  const forks: number[] = [];
  const branch = (): bigint[] => {
    const base = prompts.length === 0 || rnd() < 0.15 ? [] : prompts[int(prompts.length)];
    const at = rnd() < 0.4 ? base.length : int(base.length + 1);
    forks.push(at);
    return [...base.slice(0, at), ...Array.from({ length: 1 + int(30) }, hash)];
  };
  for (let p = 0; p < 6; p++) prompts.push(branch());
  const idx = new BlockIndex(8);
  const instances = ['a', 'b', 'c'].slice(0, 1 + int(3));
  const gpu = (inst: string) => idx.holder(inst, 0, 'GPU');
  const ops = 10 + int(60);
  for (let step = 0; step < ops; step++) {
    const op = rnd();
    const inst = instances[int(instances.length)];
    if (rnd() < 0.1) prompts.push(branch());
    const which = int(prompts.length);
    const prompt = prompts[which];
    const to = 1 + int(prompt.length);
    if (op < 0.1) {
      // A branch stored after the prefix it shares (a run of its own: the parent ends no run).
      const at = forks[which];
      if (at > 0) idx.store(gpu(inst), BigUint64Array.from(prompt.slice(at)), null, 0, prompt[at - 1]);
    } else if (op < 0.3) {
      // A whole chain: a run of its own (named parent or not).
      const from = rnd() < 0.7 ? 0 : int(to);
      idx.store(
        gpu(inst),
        BigUint64Array.from(prompt.slice(from, to)),
        null,
        0,
        from > 0 && rnd() < 0.5 ? prompt[from - 1] : null,
      );
    } else if (op < 0.42) {
      // A chain in pieces, each naming its parent (a prefill in chunks): one run continued.
      for (let a = 0; a < to; ) {
        const e = Math.min(to, a + 1 + int(10));
        idx.store(gpu(inst), BigUint64Array.from(prompt.slice(a, e)), null, 0, a > 0 ? prompt[a - 1] : null);
        a = e;
      }
    } else if (op < 0.67) {
      // Routed-to touches: a prefix, sometimes again shorter or longer at the same clock.
      const seq = BigUint64Array.from(prompt.slice(0, to));
      idx.touch(inst, 0, seq, int(to + 2));
      if (rnd() < 0.3) idx.touch(inst, 0, seq, int(to + 2));
    } else if (op < 0.85) {
      // Evictions, the deepest first (one block or several).
      const k = 1 + int(4);
      for (let j = 0; j < k; j++) idx.remove(gpu(inst), BigUint64Array.of(prompt[to - 1 - Math.min(j, to - 1)]));
    } else {
      // A block anywhere.
      idx.remove(gpu(inst), BigUint64Array.of(prompt[int(prompt.length)]));
    }
  }
  let compared = 0;
  let cut = 0;
  for (const inst of instances) {
    const id = gpu(inst);
    const held = idx.holderBlocks(id);
    if (held.length > 0 && rnd() < 0.8) idx.remove(id, BigUint64Array.of(held[int(held.length)].hash)); // full once
    const count = idx.holderBlocks(id).length;
    for (let q = 0; q < 6; q++) {
      const prompt = prompts[int(prompts.length)];
      const seq = BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length)));
      const depth = rnd() < 0.7 ? seq.length : int(seq.length + 2);
      for (let allocations = 0; allocations <= count + 2; allocations++) {
        const want = reference(idx, inst, seq, depth, allocations);
        expect(
          idx.survivingPrefix(inst, 0, seq, depth, allocations),
          `seed ${seed} ${inst} q${q} alloc ${allocations}`,
        ).toBe(want);
        compared++;
        if (want < Math.min(depth, seq.length)) cut++;
      }
      // Through the walk: the device prefix it found, judged from the records it read.
      const cands = instances.map((instance) => ({ instance, dpRank: 0 }));
      const allocs = Int32Array.from(cands, () => int(count + 3));
      const o = idx.overlapsFor(seq, 0, cands, allocs);
      cands.forEach((c, j) => {
        expect(o.surviving[j]).toBe(reference(idx, c.instance, seq, o.device[j], allocs[j]));
      });
    }
  }
  return { compared, cut };
}

describe('survivingPrefix by runs (O(1) a run whose keys are known)', () => {
  it('answers as the block-by-block judgement on thousands of random GPU caches and allocations', () => {
    let compared = 0;
    let cut = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), (seed) => {
        const s = scenario(seed);
        compared += s.compared;
        cut += s.cut;
      }),
      { numRuns: 700 },
    );
    // Judgements that end a prefix early are the ones the runs' formula decides.
    expect(cut).toBeGreaterThan(compared / 10);
  });

  it('judges a run one store wrote, touched and evicted from its end, without reading its blocks', () => {
    // 40 blocks stored at once: keys 40 - pos; the deepest evicted (the cache is full); then the
    // first 10 touched. The judgement must find the first block that goes from the formula.
    const idx = new BlockIndex(8);
    const seq = BigUint64Array.from({ length: 40 }, (_, i) => (BigInt(i + 1) * 0x9e3779b97f4a7c15n) & MASK);
    const h = idx.holder('a', 0, 'GPU');
    idx.store(h, seq);
    idx.remove(h, seq.subarray(39));
    // clock 40, count 39, peak 40: need = allocations - 1; a block goes when key <= 1 + need.
    expect(idx.survivingPrefix('a', 0, seq, 39, 1)).toBe(39);
    expect(idx.survivingPrefix('a', 0, seq, 39, 2)).toBe(38); // key 2 <= 2
    expect(idx.survivingPrefix('a', 0, seq, 39, 11)).toBe(29);
    idx.touch('a', 0, seq, 10);
    expect(idx.survivingPrefix('a', 0, seq, 39, 11)).toBe(29);
    expect(idx.survivingPrefix('a', 0, seq, 39, 31)).toBe(10); // every stored key goes, the touched ones stay
    expect(idx.survivingPrefix('a', 0, seq, 39, 39)).toBe(10);
    expect(idx.survivingPrefix('a', 0, seq, 39, 40)).toBe(0); // all go
    // A shorter touch later: two steps, judged block by block, the same answers.
    idx.store(h, BigUint64Array.of(12345n)); // the clock moves
    idx.touch('a', 0, seq, 5);
    for (let a = 0; a <= 42; a++) expect(idx.survivingPrefix('a', 0, seq, 39, a)).toBe(reference(idx, 'a', seq, 39, a));
  });

  it('follows a run only as far as the prompt does (a branch stored as its own run)', () => {
    // Run X = a0..a9, stored first (older keys); run Y = b5..b9 after a4, stored later. The prompt
    // a0..a4 b5..b9 leaves X at 5: X's old blocks a5.. are not the prompt's, Y's newer ones are.
    const idx = new BlockIndex(8);
    const a = Array.from({ length: 10 }, (_, i) => (BigInt(i + 1) * 0x9e3779b97f4a7c15n) & MASK);
    const b = Array.from({ length: 5 }, (_, i) => (BigInt(i + 100) * 0x9e3779b97f4a7c15n) & MASK);
    const h = idx.holder('a', 0, 'GPU');
    idx.store(h, BigUint64Array.from(a));
    idx.store(h, BigUint64Array.from(b), null, 0, a[4]);
    idx.remove(h, BigUint64Array.of(a[9]));
    const prompt = BigUint64Array.from([...a.slice(0, 5), ...b]);
    for (let n = 0; n <= 16; n++) {
      const want = reference(idx, 'a', prompt, 10, n);
      expect(idx.survivingPrefix('a', 0, prompt, 10, n), `allocations ${n}`).toBe(want);
    }
    expect(reference(idx, 'a', prompt, 10, 5)).toBe(10); // X's a5 would go, but the prompt is on Y there
  });

  it('finds a GPU holder made or bound after a judgement found none (no scan per judgement meanwhile)', () => {
    const idx = new BlockIndex(8);
    const seq = BigUint64Array.from({ length: 8 }, (_, i) => (BigInt(i + 7) * 0x9e3779b97f4a7c15n) & MASK);
    // Booked before its engine's first event: a candidate without a GPU holder keeps the whole depth.
    idx.store(idx.speculativeHolder('x', 0, 2000), seq, null, 5000);
    idx.store(idx.speculativeHolder('y', 0, 2000), seq, null, 5000);
    expect(idx.survivingPrefix('x', 0, seq, 8, 100)).toBe(8);
    expect(idx.survivingPrefix('y', 0, seq, 8, 100)).toBe(8);
    // x's engine publishes (a full cache that evicted once): now judged.
    const gx = idx.holder('x', 0, 'GPU');
    idx.store(gx, seq);
    idx.remove(gx, seq.subarray(7));
    expect(idx.survivingPrefix('x', 0, seq, 7, 100)).toBe(0);
    // y's engine publishes through a backend of another name, bound to y afterwards.
    const gy = idx.holder('pod-y', 0, 'GPU');
    idx.store(gy, seq);
    idx.remove(gy, seq.subarray(7));
    expect(idx.survivingPrefix('y', 0, seq, 7, 100)).toBe(7);
    idx.bindBackend('pod-y', 'y');
    expect(idx.survivingPrefix('y', 0, seq, 7, 100)).toBe(0);
  });
});
