// The router's write paths' fast paths (round eight): a U64Table's rows keep every payload word
// across growth and deletion (rows are copied word by word), an idle worker's emptied in-flight
// table serves the next worker that books (ActiveSequences' spare tables), and a store finds its
// parent's record at the holder's newest record before it walks the parent block's holders.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { U64Table } from '../../src/indexer/u64-table.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';

const MASK = (1n << 64n) - 1n;
const hashOf = (id: number) => (BigInt(id + 1) * 0x9e3779b97f4a7c15n) & MASK;

describe('U64Table rows', () => {
  it('keep every payload word through doubling, fine steps, deletions and a shrink (random, against a Map)', () => {
    for (const seed of [1, 2, 3]) {
      const rnd = mulberry32(seed);
      const st = 6;
      const t = new U64Table(st, 16, 0.7, { fromRows: 512, maxLoad: 0.7 });
      const model = new Map<string, number[]>();
      const keys: Array<[number, number]> = [];
      for (let step = 0; step < 20000; step++) {
        if (keys.length > 0 && rnd() < 0.35) {
          const at = Math.floor(rnd() * keys.length);
          const [lo, hi] = keys[at];
          keys[at] = keys[keys.length - 1];
          keys.pop();
          t.removeSlot(t.find(lo, hi));
          model.delete(`${lo}:${hi}`);
        } else {
          const lo = (rnd() * 2 ** 32) | 0;
          const hi = rnd() < 0.5 ? 0 : (rnd() * 2 ** 32) | 0;
          const s = t.insert(lo, hi);
          if (!t.created) continue;
          const words = [1, 2, 3].map(() => (rnd() * 2 ** 32) | 0);
          for (let k = 0; k < 3; k++) t.data[s * st + 3 + k] = words[k];
          keys.push([lo, hi]);
          model.set(`${lo}:${hi}`, words);
        }
        if (step === 15000)
          for (let k = keys.length - 1; k >= 200; k--) {
            const [lo, hi] = keys.pop()!;
            t.removeSlot(t.find(lo, hi));
            model.delete(`${lo}:${hi}`);
          }
        if (step === 15000) expect(t.shrink()).toBe(true);
      }
      expect(t.size).toBe(model.size);
      expect(t.capacity).toBeGreaterThan(16);
      for (const [lo, hi] of keys) {
        const s = t.find(lo, hi);
        expect(s).toBeGreaterThanOrEqual(0);
        expect(Array.from(t.data.subarray(s * st, s * st + st))).toEqual([lo, hi, 1, ...model.get(`${lo}:${hi}`)!]);
      }
    }
  });
});

describe('ActiveSequences spare tables', () => {
  it("a worker given an idle worker's emptied table holds only its own blocks, and the idle one none", () => {
    const a = new ActiveSequences();
    const internals = a as unknown as { spare: U64Table[] };
    const p = BigUint64Array.from({ length: 12 }, (_, i) => hashOf(i));
    const q = BigUint64Array.from({ length: 9 }, (_, i) => hashOf(100 + i));
    // Worker c holds q's first blocks, but not as a prompt's first block: the held prefixes of q are
    // then read from each worker's own table, not from q[0]'s list of roots.
    a.book('c', 'wc', 0, BigUint64Array.from([hashOf(500), ...q.slice(0, 4)]), 1, 0);
    a.book('a1', 'wa', 0, p, 1, 0);
    a.book('a2', 'wa', 0, p.slice(0, 5), 1, 0);
    expect(internals.spare.length).toBe(0);
    a.free('a1');
    a.free('a2');
    // Worker a is idle: its table (empty) waits for the next worker.
    expect(internals.spare.length).toBe(1);
    const table = internals.spare[0];
    expect(table.size).toBe(0);
    a.book('b', 'wb', 0, q.slice(0, 7), 1, 0);
    expect(internals.spare.length).toBe(0);
    expect(table.size).toBe(7);
    let held = a.heldPrefixes(q);
    expect([held.of('wa', 0), held.of('wb', 0), held.of('wc', 0)]).toEqual([0, 7, 4]);
    held = a.heldPrefixes(p);
    expect([held.of('wa', 0), held.of('wb', 0)]).toEqual([0, 0]);
    // Worker a books again (a new table: b has its old one); q's prefix through c and b as before.
    a.book('a3', 'wa', 0, q.slice(0, 2), 1, 0);
    held = a.heldPrefixes(q);
    expect([held.of('wa', 0), held.of('wb', 0)]).toEqual([2, 7]);
    expect(a.load('wb', 0).activeBlocks).toBe(7);
    expect(a.load('wa', 0).activeBlocks).toBe(2);
    a.free('b');
    a.free('a3');
    a.free('c');
    expect(a.totals().activeBlocks).toBe(0);
    expect(internals.spare.every((t) => t.size === 0)).toBe(true);
  });
});

describe('BlockIndex store: the parent at the holder newest record', () => {
  const R = 8;
  const R_LO = 0;
  const R_HOLDER = 2;
  const R_NEXT_E = 3;
  const R_RUN = 6;
  const R_POS = 7;
  interface Internals {
    table: U64Table;
    rec: Int32Array;
  }
  /** (run, position) of the holder's record of a block. */
  const place = (idx: BlockIndex, holder: number, h: bigint): [number, number] => {
    const x = idx as unknown as Internals;
    const v = new Int32Array(BigUint64Array.of(h).buffer);
    const slot = x.table.find(v[0], v[1]);
    for (let r = x.table.data[slot * 4 + 3]; r !== -1; r = x.rec[r * R + R_NEXT_E])
      if (x.rec[r * R + R_HOLDER] === holder) {
        expect(x.rec[r * R + R_LO]).toBe(v[0]);
        return [x.rec[r * R + R_RUN], x.rec[r * R + R_POS]];
      }
    throw new Error('no record');
  };

  it('continues the run of the parent, at the tail or not, and never of a tail that only shares its low half', () => {
    const idx = new BlockIndex(16);
    const g = idx.holder('e0', 0, 'GPU');
    const other = idx.holder('e1', 0, 'GPU');
    const H = (...xs: bigint[]) => BigUint64Array.from(xs);
    const b = (i: number) => hashOf(i);
    // A chain stored in two chunks: the second's parent is the holder's newest record.
    idx.store(g, H(b(0), b(1), b(2)));
    idx.store(other, H(b(0), b(1), b(2)));
    idx.store(g, H(b(3), b(4)), null, 0, b(2));
    const run = place(idx, g, b(0))[0];
    expect([0, 1, 2, 3, 4].map((i) => place(idx, g, b(i)))).toEqual([0, 1, 2, 3, 4].map((i) => [run, i]));
    // Another chain in between: the parent (b4) is not the newest record; it is found in its block.
    idx.store(g, H(b(10)));
    idx.store(g, H(b(5)), null, 0, b(4));
    expect(place(idx, g, b(5))).toEqual([run, 5]);
    // A block whose low half equals b5's (another high half) is the holder's newest record; a store
    // whose parent is b5 continues b5's run, not that block's.
    const twin = (b(5) & 0xffff_ffffn) | ((b(5) ^ (0x1234n << 40n)) & ~0xffff_ffffn);
    expect(twin).not.toBe(b(5));
    idx.store(g, H(twin));
    const twinRun = place(idx, g, twin)[0];
    expect(twinRun).not.toBe(run);
    idx.store(g, H(b(6)), null, 0, b(5));
    expect(place(idx, g, b(6))).toEqual([run, 6]);
    // A parent in the middle of its run starts a new run; the holder's newest record as parent continues its run.
    idx.store(g, H(b(20)), null, 0, b(2));
    const fork = place(idx, g, b(20));
    expect(fork[0]).not.toBe(run);
    expect(fork[1]).toBe(0);
    idx.store(g, H(b(21)), null, 0, b(20));
    expect(place(idx, g, b(21))).toEqual([fork[0], 1]);
    expect(place(idx, other, b(2))[1]).toBe(2);
  });

  it("takes the record a parent's resolve() found only when it is the holder's and still lives", () => {
    const idx = new BlockIndex(16);
    // Two media of one (backend, dp rank): one group, one engine map.
    const gpu = idx.holder('e0', 0, 'GPU');
    const cpu = idx.holder('e0', 0, 'CPU');
    const H = (...xs: bigint[]) => BigUint64Array.from(xs);
    const b = (i: number) => hashOf(i);
    const e = (i: number) => hashOf(1000 + i);
    idx.store(gpu, H(b(0), b(1), b(2)), H(e(0), e(1), e(2)));
    const gpuRun = place(idx, gpu, b(0))[0];
    // The CPU tier stores the same blocks later: the engine map's row for e2 now names its record.
    idx.store(cpu, H(b(0), b(1), b(2)), H(e(0), e(1), e(2)));
    const cpuRun = place(idx, cpu, b(0))[0];
    idx.store(gpu, H(b(50)), H(e(50)));
    expect(idx.resolve(gpu, e(2))).toBe(b(2));
    // The GPU holder continues its own run through b2, not the CPU record resolve() found.
    idx.store(gpu, H(b(3)), H(e(3)), 0, b(2));
    expect(place(idx, gpu, b(3))).toEqual([gpuRun, 3]);
    // The CPU holder's record resolve() found is its parent: its run goes on.
    idx.store(cpu, H(b(60)), H(e(60)));
    expect(idx.resolve(cpu, e(3))).toBe(b(3));
    expect(idx.resolve(cpu, e(2))).toBe(b(2));
    idx.store(cpu, H(b(4)), H(e(4)), 0, b(2));
    expect(place(idx, cpu, b(4))).toEqual([cpuRun, 3]);
    // A resolved record freed since is not taken for the parent, even where its stale row would
    // still name the holder, the block and a run's last position.
    idx.store(gpu, H(b(40), b(41)), H(e(40), e(41)));
    const run40 = place(idx, gpu, b(40))[0];
    expect(idx.resolve(gpu, e(41))).toBe(b(41));
    idx.remove(gpu, H(e(41)));
    idx.remove(gpu, H(e(1))); // another free row, taken first by the next store
    idx.store(gpu, H(b(42)), H(e(42)), 0, b(40));
    expect(place(idx, gpu, b(42))).toEqual([run40, 1]);
    idx.store(gpu, H(b(43)), H(e(43)), 0, b(41));
    expect(place(idx, gpu, b(43))[1]).toBe(0);
  });
});

describe('BlockIndex expire: one walk per crowded block', () => {
  it('frees what the block-by-block sweep frees, in the same order (rows, lists and answers equal)', () => {
    for (let seed = 1; seed <= 6; seed++) {
      const rnd = mulberry32(seed);
      const a = new BlockIndex(64);
      const b = new BlockIndex(64);
      // b walks each block's list from its head for every record it frees (the sweep before).
      (b as unknown as { markCrowdedGone: () => null }).markCrowdedGone = () => null;
      const prompt = new BigUint64Array(40).map((_, i) => hashOf(seed * 1000 + i));
      const instances = Array.from({ length: 60 }, (_, i) => `i${i}`);
      let now = 0;
      let crowdedFrees = 0;
      for (let step = 0; step < 300; step++) {
        now += 1;
        const inst = instances[Math.floor(rnd() * instances.length)];
        const op = rnd();
        const depth = 1 + Math.floor(rnd() * prompt.length);
        const ttl = [5, 10, 20][Math.floor(rnd() * 3)];
        for (const x of [a, b]) {
          if (op < 0.6) x.speculate(inst, 0, prompt.subarray(0, depth), ttl, now);
          else if (op < 0.8) x.store(x.holder(inst, 0, 'GPU'), prompt.subarray(0, depth));
          else if (op < 0.85) x.remove(x.holder(inst, 0, 'GPU'), prompt.subarray(depth - 1, depth));
        }
        if (op >= 0.85) {
          const n = a.expire(now);
          expect(b.expire(now)).toBe(n);
          crowdedFrees += n;
        }
        const rows = (x: BlockIndex) =>
          x as unknown as {
            rec: Int32Array;
            table: { data: Int32Array };
            holders: Array<{ head: number; tail: number }>;
          };
        expect(rows(a).rec).toEqual(rows(b).rec);
        expect(rows(a).table.data).toEqual(rows(b).table.data);
        expect(rows(a).holders.map((h) => [h.head, h.tail])).toEqual(rows(b).holders.map((h) => [h.head, h.tail]));
        expect(a.query(prompt, now)).toEqual(b.query(prompt, now));
      }
      expect(crowdedFrees).toBeGreaterThan(500);
    }
  });
});
