// The query walk of issue 40 (predicted holder stops, checked against the rows' signatures) must
// answer exactly as the walk it replaced, which read the records of every block whose signature
// differed from the previous block's. That walk is kept below as the oracle, copied from
// src/indexer/block-index.ts at d4ded5e with only its scratch arrays made its own.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BlockIndex, type OverlapResult } from '../../src/indexer/block-index.js';
import type { U64Table } from '../../src/indexer/u64-table.js';
import { type Medium, TIER_BIT } from '../../src/indexer/tiers.js';
import { mulberry32 } from '../../src/common/prng.js';

// ------------------------------------------------------------------------------ the oracle

const NONE = -1;
const GPU = TIER_BIT.GPU;
const GPU_CPU = TIER_BIT.GPU | TIER_BIT.CPU;
const R = 8;
const R_HOLDER = 2;
const R_NEXT_E = 3;
const T = 4;
const T_SIG = 2;
const T_HEAD = 3;

/** The index's own arrays the old walk read (private fields, read through this view only). */
interface Internals {
  table: U64Table;
  rec: Int32Array;
  recExp: Float64Array;
  hCand: Int32Array;
  hBit: Int32Array;
  hSpec: Uint8Array;
  cands: Array<{ instance: string; dpRank: number }>;
}

function oracleQuery(
  index: BlockIndex,
  seq: BigUint64Array,
  now: number,
  limitInstances?: ReadonlySet<string>,
): OverlapResult {
  const { table, rec, recExp, hCand, hBit, hSpec, cands } = index as unknown as Internals;
  const sv = new Int32Array(seq.buffer, seq.byteOffset, seq.length * 2);
  const n = seq.length;
  const m = cands.length;
  const qStamp = new Int32Array(m);
  const qMaskDepth = new Int32Array(m);
  const qMask = new Int32Array(m);
  const qDev = new Int32Array(m);
  const qHost = new Int32Array(m);
  const qDisk = new Int32Array(m);
  const qAlive = new Int32Array(m);
  const qid = 1;
  const tbl = table.data;
  // Levels still extending are marked EXT; a level's depth is fixed when it stops.
  const EXT = -1;
  let alive = 0;
  const touched: number[] = [];
  let shared = 0;
  let sharedAlive = true;
  let sharedHere = false;
  let prevSig = 0; // signatures are odd, so block 0 always gets a full scan
  let done = 0; // blocks walked
  for (let i = 0; i < n; i++) {
    const slot = table.find(sv[2 * i], sv[2 * i + 1]);
    if (slot === NONE) break;
    const sig = tbl[slot * T + T_SIG];
    // Same holder set as the block before: every live level extends, nothing to scan.
    if (sig === prevSig) {
      if (sharedAlive) shared = i + 1;
      done = i + 1;
      continue;
    }
    prevSig = sig;
    sharedHere = false;
    for (let r = tbl[slot * T + T_HEAD]; r !== NONE; r = rec[r * R + R_NEXT_E]) {
      const h = rec[r * R + R_HOLDER];
      const c = hCand[h];
      if (c === NONE) {
        sharedHere = true;
        continue;
      }
      if (hSpec[h] === 1 && recExp[r] <= now) continue;
      if (qStamp[c] !== qid) {
        if (i !== 0 || (limitInstances && !limitInstances.has(cands[c].instance))) continue;
        qStamp[c] = qid;
        qDev[c] = EXT;
        qHost[c] = EXT;
        qDisk[c] = EXT;
        qMaskDepth[c] = -1;
        qAlive[alive++] = c;
        touched.push(c);
      } else if (qDisk[c] !== EXT) continue; // dropped at an earlier depth
      if (qMaskDepth[c] !== i) {
        qMaskDepth[c] = i;
        qMask[c] = hBit[h];
      } else qMask[c] |= hBit[h];
    }
    if (sharedAlive && sharedHere) shared = i + 1;
    else sharedAlive = false;
    // Stop the levels this block ends; drop candidates that do not hold it at all.
    for (let k = 0; k < alive; ) {
      const c = qAlive[k];
      if (qMaskDepth[c] !== i) {
        if (qDev[c] === EXT) qDev[c] = i;
        if (qHost[c] === EXT) qHost[c] = i;
        qDisk[c] = i;
        qAlive[k] = qAlive[--alive];
        continue;
      }
      const mask = qMask[c];
      if (!(mask & GPU) && qDev[c] === EXT) qDev[c] = i;
      if (!(mask & GPU_CPU) && qHost[c] === EXT) qHost[c] = i;
      k++;
    }
    done = i + 1;
    if (alive === 0 && !sharedAlive) break;
  }
  for (let k = 0; k < alive; k++) {
    const c = qAlive[k];
    if (qDev[c] === EXT) qDev[c] = done;
    if (qHost[c] === EXT) qHost[c] = done;
    if (qDisk[c] === EXT) qDisk[c] = done;
  }
  const candidates = touched.map((c) => ({
    instance: cands[c].instance,
    dpRank: cands[c].dpRank,
    device: qDev[c],
    host: qHost[c],
    disk: qDisk[c],
  }));
  return { queriedBlocks: n, candidates, sharedBlocks: shared };
}

/** survivingPrefix and touch before issue 40: a scan of each prefix block's holders, per block. */
interface LruInternals extends Internals {
  recTouch: Float64Array;
  holders: Array<{ clock: number; peak: number; count: number; evicted: number }>;
}

/** The confirmed GPU holder the index judges (an instance may publish through two backends). */
function gpuHolderOf(index: BlockIndex, instance: string, dpRank: number): number {
  return (index as unknown as { gpuHolder(instance: string, dpRank: number): number }).gpuHolder(instance, dpRank);
}

function recordOf(x: LruInternals, seq: BigUint64Array, i: number, id: number): number {
  const sv = new Int32Array(seq.buffer, seq.byteOffset, seq.length * 2);
  const slot = x.table.find(sv[2 * i], sv[2 * i + 1]);
  if (slot === NONE) return NONE;
  for (let r = x.table.data[slot * T + T_HEAD]; r !== NONE; r = x.rec[r * R + R_NEXT_E])
    if (x.rec[r * R + R_HOLDER] === id) return r;
  return NONE;
}

function oracleSurviving(
  index: BlockIndex,
  instance: string,
  dpRank: number,
  seq: BigUint64Array,
  depth: number,
  allocations: number,
): number {
  const x = index as unknown as LruInternals;
  const id = gpuHolderOf(index, instance, dpRank);
  const h = id === NONE ? null : x.holders[id];
  if (!h || h.evicted === 0 || depth <= 0) return depth;
  const need = allocations - (h.peak - h.count);
  if (need <= 0) return depth;
  const d = Math.min(depth, seq.length);
  for (let i = 0; i < d; i++) {
    const r = recordOf(x, seq, i, id);
    if (r === NONE) continue;
    const newer = Math.max(0, Math.floor(h.clock - x.recTouch[r]));
    if (h.count - 1 - newer < need) return i;
  }
  return depth;
}

function oracleTouch(index: BlockIndex, instance: string, dpRank: number, seq: BigUint64Array, depth: number): void {
  const x = index as unknown as LruInternals;
  const id = gpuHolderOf(index, instance, dpRank);
  if (id === NONE) return;
  const d = Math.min(depth, seq.length);
  for (let i = 0; i < d; i++) {
    const r = recordOf(x, seq, i, id);
    if (r !== NONE) x.recTouch[r] = x.holders[id].clock + 0.5 - i / (2 * (d + 1));
  }
}

// ------------------------------------------------------------------------------ random indexes

const MEDIA: Medium[] = ['GPU', 'CPU', 'DISK', 'EXTERNAL'];
const ENGINE_XOR = 0x5eed_0000_0000_0001n;

interface Knobs {
  seed: number;
  instances: number;
  prompts: number;
  promptBlocks: number;
  ops: number;
}

/** A random index the way a fleet fills one: chains stored whole or in pieces, branches, evictions, bookings. */
function randomIndex(k: Knobs) {
  const rnd = mulberry32(k.seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const pick = <X>(xs: readonly X[]): X => xs[int(xs.length)];
  const u64 = () => (BigInt(int(2 ** 32)) << 32n) | BigInt(int(2 ** 32));
  // Prompts share prefixes: each later one branches off an earlier one at a random depth.
  const prompts: bigint[][] = [];
  for (let p = 0; p < k.prompts; p++) {
    const base = p === 0 || rnd() < 0.2 ? [] : pick(prompts).slice(0, int(k.promptBlocks));
    prompts.push([...base, ...Array.from({ length: Math.max(1, k.promptBlocks - base.length) }, u64)]);
  }
  const idx = new BlockIndex(4);
  const instances = Array.from({ length: k.instances }, (_, i) => `i${i}`);
  // Some instances publish through a backend of another name; 'pool' is a shared pool.
  idx.bindBackend('pool', null);
  for (const inst of instances) if (rnd() < 0.3) idx.bindBackend(`pod-${inst}`, inst);
  const backends = [...instances, ...instances.filter((i) => rnd() < 0.3).map((i) => `pod-${i}`), 'pool'];
  const dual = new Set(backends.filter(() => rnd() < 0.2));
  const engineOf = (b: string, hs: bigint[]) => (dual.has(b) ? BigUint64Array.from(hs, (h) => h ^ ENGINE_XOR) : null);
  let now = 100;
  for (let step = 0; step < k.ops; step++) {
    const op = rnd();
    const prompt = pick(prompts);
    const b = pick(backends);
    const rank = b === 'pool' ? 0 : int(2);
    const medium: Medium = b === 'pool' ? 'EXTERNAL' : rnd() < 0.6 ? 'GPU' : pick(MEDIA);
    if (op < 0.45) {
      // A chain from a random depth, whole or in pieces; a piece names its parent most of the time.
      const from = rnd() < 0.6 ? 0 : int(prompt.length);
      const to = from + 1 + int(prompt.length - from);
      const h = idx.holder(b, rank, medium);
      for (let a = from; a < to; ) {
        const e = rnd() < 0.5 ? to : Math.min(to, a + 1 + int(8));
        const piece = prompt.slice(a, e);
        const parent = a > 0 && rnd() < 0.8 ? prompt[a - 1] : null;
        idx.store(h, BigUint64Array.from(piece), engineOf(b, piece), 0, parent);
        a = e;
      }
    } else if (op < 0.6) {
      // Evictions: the deepest blocks first, or anywhere.
      const h = idx.holder(b, rank, medium);
      const gone =
        rnd() < 0.5 ? prompt.slice(prompt.length - 1 - int(prompt.length)) : prompt.filter(() => rnd() < 0.2);
      idx.remove(h, BigUint64Array.from(dual.has(b) ? gone.map((x) => x ^ ENGINE_XOR) : gone));
    } else if (op < 0.78) {
      // A booking: the routed prompt's prefix, speculative until it expires.
      const inst = pick(instances);
      const to = 1 + int(prompt.length);
      idx.store(
        idx.speculativeHolder(inst, int(2), pick([50, 2000])),
        BigUint64Array.from(prompt.slice(0, to)),
        null,
        now + 1 + int(60),
      );
    } else if (op < 0.82) {
      idx.clearHolder(idx.holder(b, rank, medium));
    } else if (op < 0.84) {
      idx.removeInstance(pick(instances), rnd() < 0.5 ? undefined : int(2));
    } else if (op < 0.86) {
      idx.bindBackend(pick(backends.filter((x) => x !== 'pool')), rnd() < 0.2 ? null : pick(instances));
    } else if (op < 0.95) {
      now += int(30);
      if (rnd() < 0.3) idx.expire(now);
    }
  }
  return { idx, prompts, instances, rnd, now };
}

function queries(k: Knobs): Array<{ got: unknown; want: unknown }> {
  const { idx, prompts, instances, rnd, now } = randomIndex(k);
  const int = (n: number) => Math.floor(rnd() * n);
  const out: Array<{ got: unknown; want: unknown }> = [];
  for (let q = 0; q < 12; q++) {
    const prompt = prompts[int(prompts.length)];
    const blocks = prompt.slice(0, 1 + int(prompt.length));
    if (rnd() < 0.2) blocks.push(12345n + BigInt(q)); // a block nobody holds
    const seq = BigUint64Array.from(blocks);
    const at = now - 20 + int(80);
    const limit = rnd() < 0.5 ? undefined : new Set(instances.filter(() => rnd() < 0.6));
    out.push({ got: idx.query(seq, at, limit), want: oracleQuery(idx, seq, at, limit) });
    // The scheduler's entry: a list of (instance, dp rank), in its order, duplicates allowed.
    const cands = Array.from({ length: int(8) }, () => ({
      instance: rnd() < 0.9 ? instances[int(instances.length)] : 'nobody',
      dpRank: int(2),
    }));
    const o = idx.overlapsFor(seq, at, cands);
    const ref = oracleQuery(idx, seq, at, new Set(cands.map((c) => c.instance)));
    const per = (c: { instance: string; dpRank: number }) =>
      ref.candidates.find((x) => x.instance === c.instance && x.dpRank === c.dpRank);
    out.push({
      got: { shared: o.shared, lists: cands.map((_, j) => [o.device[j], o.host[j], o.disk[j]]) },
      want: {
        shared: ref.sharedBlocks,
        lists: cands.map((c) => [per(c)?.device ?? 0, per(c)?.host ?? 0, per(c)?.disk ?? 0]),
      },
    });
  }
  return out;
}

describe('eviction awareness follows the holder list and answers as the per-block scan (issue 40)', () => {
  it('touch marks the same records, and survivingPrefix (alone and from the walk) gives the same prefix', () => {
    let cut = 0; // judgements that end a prefix early (the cases that matter)
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.integer({ min: 1, max: 8 }), (seed, instances) => {
        const k: Knobs = { seed, instances, prompts: 4, promptBlocks: 24, ops: 80 };
        // Two identical indexes: one touched the old way, one the new way.
        const a = randomIndex(k);
        const b = randomIndex(k);
        const int = (n: number) => Math.floor(a.rnd() * n);
        // Every GPU cache full: each has evicted one of its blocks.
        for (const inst of a.instances) {
          for (const rank of [0, 1]) {
            const id = gpuHolderOf(a.idx, inst, rank);
            const held = id === NONE ? [] : a.idx.holderBlocks(id);
            if (held.length === 0) continue;
            const gone = held[int(held.length)];
            for (const x of [a, b]) x.idx.remove(id, BigUint64Array.of(gone.engineHash ?? gone.hash));
          }
        }
        for (let t = 0; t < 20; t++) {
          const inst = a.instances[int(a.instances.length)];
          const rank = int(2);
          // Mostly a prompt whose first block the instance's GPU cache holds.
          const id = gpuHolderOf(a.idx, inst, rank);
          const held = new Set(id === NONE ? [] : a.idx.holderBlocks(id).map((x) => x.hash));
          const mine = a.prompts.filter((p) => held.has(p[0]));
          const prompt = mine.length > 0 && a.rnd() < 0.8 ? mine[int(mine.length)] : a.prompts[int(a.prompts.length)];
          const seq = BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length)));
          const depth = int(seq.length + 2);
          if (a.rnd() < 0.5) {
            oracleTouch(a.idx, inst, rank, seq, depth);
            b.idx.touch(inst, rank, seq, depth);
          }
          // Allocations around the holder's free room, so that some blocks go and some stay.
          const lru = (index: BlockIndex, instance: string, dpRank: number) => {
            const id = gpuHolderOf(index, instance, dpRank);
            const h = id === NONE ? null : (index as unknown as LruInternals).holders[id];
            return h ? h.peak - h.count + int(h.count + 2) : int(60);
          };
          const allocations = lru(a.idx, inst, rank);
          const want = oracleSurviving(a.idx, inst, rank, seq, depth, allocations);
          if (want < Math.min(depth, seq.length)) cut++;
          expect(b.idx.survivingPrefix(inst, rank, seq, depth, allocations)).toBe(want);
          expect(oracleSurviving(b.idx, inst, rank, seq, depth, allocations)).toBe(want);
          // Through the walk: every candidate's surviving device prefix, from the records it read.
          const cands = a.instances.flatMap((instance) => [0, 1].map((dpRank) => ({ instance, dpRank })));
          const allocs = Int32Array.from(cands, (c) => lru(b.idx, c.instance, c.dpRank));
          const o = b.idx.overlapsFor(seq, a.now, cands, allocs);
          cands.forEach((c, j) => {
            const w = oracleSurviving(b.idx, c.instance, c.dpRank, seq, o.device[j], allocs[j]);
            expect(o.surviving[j]).toBe(w);
          });
        }
      }),
      { numRuns: 300 },
    );
    expect(cut).toBeGreaterThan(500);
  });
});

describe('the predicted walk answers exactly as the block-by-block walk (issue 40)', () => {
  it('on thousands of random indexes and prompts: per instance, tier, dp rank and the shared pool', () => {
    let compared = 0;
    fc.assert(
      fc.property(
        fc.record({
          seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
          instances: fc.integer({ min: 1, max: 12 }),
          prompts: fc.integer({ min: 1, max: 6 }),
          promptBlocks: fc.integer({ min: 1, max: 40 }),
          ops: fc.integer({ min: 1, max: 120 }),
        }),
        (k) => {
          for (const { got, want } of queries(k)) {
            expect(got).toEqual(want);
            compared++;
          }
        },
      ),
      { numRuns: 2000 },
    );
    expect(compared).toBe(2000 * 24);
  });

  it('at fleet scale: hundreds of holders stopping at every depth, stored whole, in pieces or with gaps', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.integer({ min: 30, max: 200 }), (seed, fleet) => {
        const rnd = mulberry32(seed);
        const int = (n: number) => Math.floor(rnd() * n);
        const prompt = Array.from({ length: 200 }, (_, i) => BigInt(seed) * 1000n + BigInt(i) + (1n << 62n));
        const idx = new BlockIndex(64);
        for (let f = 0; f < fleet; f++) {
          const h = idx.holder(`i${f}`, 0, rnd() < 0.8 ? 'GPU' : 'CPU');
          const depth = 1 + int(prompt.length);
          const how = rnd();
          if (how < 0.5) idx.store(h, BigUint64Array.from(prompt.slice(0, depth)));
          else {
            for (let a = 0; a < depth; ) {
              const e = Math.min(depth, a + 1 + int(40));
              idx.store(h, BigUint64Array.from(prompt.slice(a, e)), null, 0, a > 0 && how < 0.9 ? prompt[a - 1] : null);
              a = e;
            }
          }
          if (rnd() < 0.1) idx.remove(h, BigUint64Array.of(prompt[int(depth)])); // a gap
          if (rnd() < 0.1)
            idx.store(
              idx.speculativeHolder(`i${f}`, 0, 2000),
              BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length))),
              null,
              1 + int(10),
            );
        }
        for (let q = 0; q < 4; q++) {
          const seq = BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length)));
          const now = int(12);
          expect(idx.query(seq, now)).toEqual(oracleQuery(idx, seq, now));
        }
      }),
      { numRuns: 80 },
    );
  });

  it('overlapsFor answers for the list given: one list reused as the index, its ids and the list change, others between', () => {
    // The walk marks a list's candidates once and keeps the marks while the list resolves to the same
    // ids: a list changed in place, a candidate that gets an id, another list or a query between must
    // each be answered for what they are.
    const rnd = mulberry32(4040);
    const int = (n: number) => Math.floor(rnd() * n);
    const prompt = Array.from({ length: 60 }, (_, i) => (BigInt(i) << 32n) + 99n);
    const names = Array.from({ length: 24 }, (_, f) => `i${f}`);
    const idx = new BlockIndex(64);
    const store = (f: number) =>
      idx.store(
        idx.holder(names[f], int(2), rnd() < 0.8 ? 'GPU' : 'CPU'),
        BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length))),
      );
    for (let f = 0; f < 8; f++) store(f);
    const list = names.map((instance) => ({ instance, dpRank: int(2) }));
    const other = names.slice(0, 10).map((instance) => ({ instance, dpRank: int(2) }));
    const answer = (o: { device: Int32Array; host: Int32Array; disk: Int32Array; shared: number }, n: number) => ({
      shared: o.shared,
      lists: Array.from({ length: n }, (_, j) => [o.device[j], o.host[j], o.disk[j]]),
    });
    const oracle = (seq: BigUint64Array, cands: Array<{ instance: string; dpRank: number }>) => {
      const ref = oracleQuery(idx, seq, 0, new Set(cands.map((c) => c.instance)));
      const per = (c: { instance: string; dpRank: number }) =>
        ref.candidates.find((x) => x.instance === c.instance && x.dpRank === c.dpRank);
      return {
        shared: ref.sharedBlocks,
        lists: cands.map((c) => [per(c)?.device ?? 0, per(c)?.host ?? 0, per(c)?.disk ?? 0]),
      };
    };
    let held = 0;
    for (let round = 0; round < 300; round++) {
      const op = rnd();
      if (op < 0.25)
        store(int(names.length)); // a new holder, perhaps a new candidate id
      else if (op < 0.4)
        list[int(list.length)] = { instance: names[int(names.length)], dpRank: int(2) }; // in place
      else if (op < 0.55) {
        const seq = BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length)));
        expect(answer(idx.overlapsFor(seq, 0, other), other.length)).toEqual(oracle(seq, other));
      } else if (op < 0.65) idx.query(BigUint64Array.from(prompt), 0, new Set(names.slice(12)));
      const seq = BigUint64Array.from(prompt.slice(0, 1 + int(prompt.length)));
      const got = answer(idx.overlapsFor(seq, 0, list), list.length);
      expect(got).toEqual(oracle(seq, list));
      held += got.lists.filter((l) => l[2] > 0).length;
    }
    expect(held).toBeGreaterThan(1000);
  });

  it('reads only block 0 when holders stored their chains whole or in pieces naming their parents', () => {
    // The work, not the time: how many blocks had their records read (the walk's seeds).
    const seeds = (idx: BlockIndex) => (idx as unknown as { qSeeds: number }).qSeeds;
    const prompt = BigUint64Array.from({ length: 300 }, (_, i) => (BigInt(i) << 40n) + 77n);
    const rnd = mulberry32(40);
    const idx = new BlockIndex(64);
    for (let f = 0; f < 400; f++) {
      const h = idx.holder(`i${f}`, f % 2, f % 5 === 0 ? 'CPU' : 'GPU');
      const depth = 1 + Math.floor(rnd() * prompt.length);
      // Decode-sized pieces, each naming its parent, interleaved with another chain of the holder.
      for (let a = 0; a < depth; a += 7) {
        idx.store(h, prompt.subarray(a, Math.min(depth, a + 7)), null, 0, a > 0 ? prompt[a - 1] : null);
        idx.store(h, BigUint64Array.of(BigInt(f) * 1000n + BigInt(a) + 1n));
      }
    }
    const got = idx.query(prompt, 0);
    expect(got).toEqual(oracleQuery(idx, prompt, 0));
    expect(got.candidates.length).toBe(400);
    expect(seeds(idx)).toBe(1);
    // Without the parents' hashes each piece is a run of its own: the walk has to read block after block.
    const blind = new BlockIndex(64);
    for (let f = 0; f < 50; f++) {
      const h = blind.holder(`i${f}`, 0, 'GPU');
      for (let a = 0; a < 100; a += 7) blind.store(h, prompt.subarray(a, Math.min(100, a + 7)));
    }
    expect(blind.query(prompt, 0)).toEqual(oracleQuery(blind, prompt, 0));
    expect(seeds(blind)).toBeGreaterThan(10);
  });
});
