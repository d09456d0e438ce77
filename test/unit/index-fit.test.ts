// The index gives back the room a sweep empties (records.ts fitTables): after the expired bookings
// of a busy spell leave, the seq-hash table, the record rows (compacted, renumbered) and the engine
// maps shrink, and every answer stays what an index that never held those bookings gives (the
// model): query, overlapsFor with the LRU estimate, resolve of every engine hash, every holder's
// blocks. Writes after the compaction (reusing no stale record id) keep them equal.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { U64Table } from '../../src/indexer/u64-table.js';

// 40: the shared prefixes' first blocks get >= 32 records, so the walk keeps hot-block copies of them.
const INSTANCES = Array.from({ length: 40 }, (_, i) => `e${i}`);
const ENGINE_XOR = 0x5eed_0000_0000_0000n;
const SHORT = 100; // the busy spell's bookings expire here
const LONG = 1_000_000;

function prompts(rnd: () => number, tag: bigint): bigint[][] {
  const out: bigint[][] = [];
  for (let p = 0; p < 30; p++) {
    const base = p < 5 ? [] : out[Math.floor(rnd() * p)].slice(0, Math.floor(rnd() * 12));
    const rest = Array.from(
      { length: 40 - base.length },
      (_, i) => (BigInt(p + 1) << 40n) + (tag << 32n) + BigInt(i) + (1n << 63n),
    );
    out.push([...base, ...rest]);
  }
  return out;
}

/** A random write's target: a prompt, an instance, and a run of up to 16 of the prompt's blocks (seq and engine hashes). */
function randomRun(rnd: () => number, ps: bigint[][]) {
  const p = ps[Math.floor(rnd() * ps.length)];
  const inst = INSTANCES[Math.floor(rnd() * INSTANCES.length)];
  const from = rnd() < 0.5 ? 0 : Math.floor(rnd() * p.length);
  const slice = p.slice(from, Math.min(p.length, from + 1 + Math.floor(rnd() * 16)));
  return {
    p,
    inst,
    from,
    seq: BigUint64Array.from(slice),
    eng: BigUint64Array.from(slice.map((x) => x ^ ENGINE_XOR)),
  };
}

/** Everything the index answers about the prompts and the instances, as plain values. */
function answers(idx: BlockIndex, ps: bigint[][], now: number) {
  const cands = INSTANCES.map((instance) => ({ instance, dpRank: 0 }));
  const alloc = INSTANCES.map((_, i) => 50 * i);
  const out: unknown[] = [];
  for (const p of ps) {
    const seq = BigUint64Array.from(p);
    const q = idx.query(seq, now);
    out.push(
      [...q.candidates].sort((a, b) => a.instance.localeCompare(b.instance)),
      q.sharedBlocks,
    );
    const o = idx.overlapsFor(seq, now, cands, alloc);
    out.push([...o.device], [...o.host], [...o.disk], [...o.surviving]);
    for (const inst of INSTANCES) {
      const h = idx.holder(inst, 0, 'GPU');
      out.push(p.map((x) => idx.resolve(h, x ^ ENGINE_XOR)));
      out.push(idx.survivingPrefix(inst, 0, seq, p.length, 100));
    }
  }
  for (const inst of INSTANCES) {
    for (const m of ['GPU', 'CPU'] as const) out.push(idx.holderBlocks(idx.holder(inst, 0, m)));
    for (const ttl of [50, 60]) out.push(idx.holderBlocks(idx.speculativeHolder(inst, 0, ttl)));
  }
  const { records, blocks } = idx.stats();
  out.push(records, blocks);
  return out;
}

describe('index tables after a sweep', () => {
  it('a U64Table grows in fine steps past fine.fromRows, shrinks, and keeps every key', () => {
    const t = new U64Table(4, 16, 0.7, { fromRows: 256, maxLoad: 0.8 });
    const key = (i: number): [number, number] => [Math.imul(i, 0x9e3779b1), i >> 3];
    const caps = new Set<number>();
    for (let i = 0; i < 5000; i++) {
      const s = t.insert(...key(i));
      t.data[s * 4 + 3] = i;
      caps.add(t.capacity);
      expect(t.size / t.capacity).toBeLessThanOrEqual(t.capacity > 256 ? 0.8 : 0.7);
    }
    // doubling to 256 rows, then m x 2^j: 320, 384, 448, 512, 640, ...
    expect([...caps].slice(0, 9)).toEqual([32, 64, 128, 256, 320, 384, 448, 512, 640]);
    expect(t.size / t.capacity).toBeGreaterThan(0.8 / 1.25 - 0.01);
    const has = (i: number) => {
      const s = t.find(...key(i));
      return s >= 0 && t.data[s * 4 + 3] === i;
    };
    for (let i = 0; i < 5000; i++) expect(has(i)).toBe(true);
    for (let i = 0; i < 5000; i++) if (i % 8 !== 0) t.removeSlot(t.find(...key(i)));
    const before = t.capacity;
    expect(t.shrink()).toBe(true);
    expect(t.capacity).toBeLessThan(before / 2);
    expect(t.shrink()).toBe(false); // hysteresis: at most half its limit full, not a quarter
    for (let i = 0; i < 5000; i++) expect(t.find(...key(i)) >= 0).toBe(i % 8 === 0);
    for (let i = 0; i < 5000; i += 8) expect(has(i)).toBe(true);
  });

  it('renumbers the hot-block copies the walk reads (a crowded block of bookings)', () => {
    const idx = new BlockIndex(16);
    const model = new BlockIndex(16);
    const shared = BigUint64Array.from({ length: 8 }, (_, i) => 0xabc0_0000_0000n + BigInt(i));
    for (const i of [idx, model])
      for (let k = 0; k < 40; k++) {
        // busy-spell bookings first (lower record ids), so the compaction moves the shared block's records
        if (i === idx)
          for (let b = 0; b < 20; b++)
            i.store(
              i.speculativeHolder(`e${k}`, 0, 50),
              BigUint64Array.from({ length: 8 }, (_, j) => BigInt(k * 1000 + b * 10 + j + 1)),
              null,
              SHORT,
            );
        i.store(i.speculativeHolder(`e${k}`, 0, 60), shared.subarray(0, 1 + (k % 8)), null, LONG);
      }
    const answer = (i: BlockIndex) => i.query(shared, SHORT).candidates.map((c) => [c.instance, c.device]);
    answer(idx); // the walk copies the shared block 0 (40 records)
    idx.expire(SHORT);
    model.expire(SHORT);
    expect(answer(idx)).toEqual(answer(model));
    expect(answer(idx)).toHaveLength(40);
  });

  it("renumbers each run's last record (judgeRun's O(1) path reads it by id)", () => {
    type Runs = { rec: Int32Array; runTail: Int32Array; holders: Array<{ tail: number }> };
    const idx = new BlockIndex(16);
    // Bookings first (lower record ids), so the compaction moves the chain's records.
    for (let b = 0; b < 200; b++)
      idx.store(idx.speculativeHolder('e0', 0, 50), BigUint64Array.of(BigInt(b + 1)), null, SHORT);
    const chain = BigUint64Array.from({ length: 12 }, (_, i) => 0xc4a1_0000n + BigInt(i));
    const h = idx.holder('e1', 0, 'GPU');
    idx.store(
      h,
      chain,
      BigUint64Array.from(chain, (x) => x ^ ENGINE_XOR),
      0,
      null,
    );
    idx.expire(SHORT);
    const x = idx as unknown as Runs;
    const last = x.holders[h].tail; // the chain's last block, the run's last record
    expect(last).toBe(11); // renumbered from 211
    expect(x.runTail[x.rec[last * 8 + 6]]).toBe(last);
  });

  for (const seed of [1, 2]) {
    it(`reserved record rows: the same answers and bytes as rows that grow, no growth copy (seed ${seed})`, () => {
      const rnd = mulberry32(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
      const ps = prompts(rnd, 0n);
      const busy = prompts(rnd, 1n);
      const RESERVE = 6000;
      const grown = new BlockIndex(16);
      const reserved = new BlockIndex(16, undefined, RESERVE);
      type Rows = { rec: Int32Array; recTouch: Float64Array; recEng: Int32Array; recTop: number };
      const rows = reserved as unknown as Rows;
      const arrays = [rows.rec, rows.recTouch, rows.recEng];
      expect(rows.recTouch.length).toBe(RESERVE);
      // The block table is sized for the reservation too (records.ts, up to 2^22 rows): the bytes
      // compared are the rest.
      const table = (i: BlockIndex) => (i as unknown as { table: { data: Int32Array; capacity: number } }).table;
      const reservedTable = table(reserved).data;
      expect(table(reserved).capacity * 0.7).toBeGreaterThanOrEqual(RESERVE);
      const rest = (i: BlockIndex) => ({ ...i.stats(), bytes: i.stats().bytes - table(i).data.byteLength });
      const both = (f: (i: BlockIndex) => void) => {
        f(grown);
        f(reserved);
      };
      const writes = (steps: number) => {
        for (let s = 0; s < steps; s++) {
          const { p, inst, from, seq, eng } = randomRun(rnd, ps);
          const op = rnd();
          const m = rnd() < 0.8 ? 'GPU' : 'CPU';
          if (op < 0.4) both((i) => i.store(i.holder(inst, 0, m), seq, eng, 0, from > 0 ? p[from - 1] : null));
          else if (op < 0.5) both((i) => i.remove(i.holder(inst, 0, m), eng));
          else if (op < 0.6) both((i) => i.store(i.speculativeHolder(inst, 0, 60), seq, null, LONG));
          else {
            const b = BigUint64Array.from(pick(busy));
            both((i) => i.store(i.speculativeHolder(inst, 0, 50), b, null, SHORT));
          }
        }
      };
      // Below the reservation: the reported bytes are the growing table's, and no row array was replaced.
      writes(200);
      expect(rows.recTop).toBeGreaterThan(1000);
      expect(rows.recTop).toBeLessThanOrEqual(RESERVE);
      expect(rest(reserved)).toEqual(rest(grown));
      expect(answers(reserved, ps, 0)).toEqual(answers(grown, ps, 0));
      expect([rows.rec, rows.recTouch, rows.recEng]).toEqual(arrays);
      expect([rows.rec, rows.recTouch, rows.recEng].every((a, k) => a === arrays[k])).toBe(true);
      expect(table(reserved).data).toBe(reservedTable);
      // Past it: the rows grow as usual; never more bytes than the growing table's.
      writes(400);
      expect(rows.recTop).toBeGreaterThan(RESERVE);
      expect(rest(reserved).bytes).toBeLessThanOrEqual(rest(grown).bytes);
      expect(table(reserved).data).toBe(reservedTable);
      expect(answers(reserved, ps, 0)).toEqual(answers(grown, ps, 0));
      // A sweep frees the short bookings: both compact, to the same rows.
      const peak = grown.stats().bytes;
      both((i) => i.expire(SHORT));
      expect(grown.stats().bytes).toBeLessThan(peak);
      expect(rest(reserved)).toEqual(rest(grown));
      expect(answers(reserved, ps, SHORT)).toEqual(answers(grown, ps, SHORT));
      writes(300);
      expect(answers(reserved, ps, SHORT)).toEqual(answers(grown, ps, SHORT));
    });
  }

  it('a reservation the runtime refuses (too large) falls back to rows that grow', () => {
    const idx = new BlockIndex(16, undefined, 2 ** 31);
    const model = new BlockIndex(16);
    const ps = prompts(mulberry32(9), 0n);
    for (const i of [idx, model])
      for (const [k, p] of ps.entries())
        i.store(i.holder(INSTANCES[k % 5], 0, 'GPU'), BigUint64Array.from(p), null, 0, null);
    expect(idx.stats()).toEqual(model.stats());
    expect(answers(idx, ps, 0)).toEqual(answers(model, ps, 0));
  });

  for (const seed of [1, 2, 3]) {
    it(`shrink, and every answer equals an index that never held the expired bookings (seed ${seed})`, () => {
      const rnd = mulberry32(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
      const ps = prompts(rnd, 0n);
      // The busy spell's bookings: prompts of their own, so the sweep leaves the shared prefixes' blocks
      // (and their hot-block copies) alone, and the compaction has to renumber the copies.
      const busy = prompts(rnd, 1n);
      const idx = new BlockIndex(16); // gets the busy spell's bookings
      const model = new BlockIndex(16); // never does
      const both = (f: (i: BlockIndex) => void) => {
        f(idx);
        f(model);
      };
      // Confirmed stores (dual key), evictions, long bookings to both; short bookings only to idx
      // (a holder per TTL class: its records are in expiry order).
      const writes = (steps: number, shortUntil: number, long: number) => {
        for (let s = 0; s < steps; s++) {
          const { p, inst, from, seq, eng } = randomRun(rnd, ps);
          const op = rnd();
          if (op < 0.3) {
            const m = rnd() < 0.8 ? 'GPU' : 'CPU';
            const parent = from > 0 ? p[from - 1] : null;
            both((i) => i.store(i.holder(inst, 0, m), seq, eng, 0, parent));
          } else if (op < 0.4) {
            const m = pick(['GPU', 'CPU'] as const);
            both((i) => i.remove(i.holder(inst, 0, m), eng));
          } else if (op < 0.45) {
            both((i) => i.store(i.speculativeHolder(inst, 0, 60), seq, null, long));
          } else if (s < shortUntil) {
            idx.store(idx.speculativeHolder(inst, 0, 50), BigUint64Array.from(pick(busy)), null, SHORT);
          }
        }
      };
      writes(3000, 3000, LONG);
      const peak = idx.stats();
      expect(peak.records).toBeGreaterThan(3 * model.stats().records);
      for (const p of ps) idx.query(BigUint64Array.from(p), SHORT); // the walk makes hot-block copies
      expect(idx.expire(SHORT)).toBeGreaterThan(0);
      model.expire(SHORT);
      const swept = idx.stats();
      // The room of the expired bookings is given back: far below the peak, within 2x of the model (which
      // grew in steps to its size; the compaction leaves 1/2 room under 2^16 rows).
      expect(swept.bytes).toBeLessThan(peak.bytes / 2);
      expect(swept.bytes).toBeLessThanOrEqual(model.stats().bytes * 2);
      expect(answers(idx, ps, SHORT)).toEqual(answers(model, ps, SHORT));
      // Writes after the compaction (new records, freed ones, another sweep) stay equal.
      writes(1500, 0, LONG + 1);
      expect(answers(idx, ps, SHORT)).toEqual(answers(model, ps, SHORT));
      idx.expire(LONG + 1);
      model.expire(LONG + 1);
      expect(answers(idx, ps, LONG + 1)).toEqual(answers(model, ps, LONG + 1));
    });
  }
});
