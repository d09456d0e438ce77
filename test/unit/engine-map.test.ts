// The dual key's engine-hash maps (src/indexer/engine-map.ts, records.ts setEngineHash /
// unmapRecord) against a model: which records carry which engine hash, under random stores
// (re-stores under a new engine hash included), removals by engine hash, clears and purges, on
// two media of each backend. A row must never outlive its record: resolve() answers exactly the
// block of a live record of the group that carries the hash.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { EngineMap } from '../../src/indexer/engine-map.js';
import type { Medium } from '../../src/indexer/tiers.js';

const BACKENDS = ['a', 'b'];
const MEDIA: Medium[] = ['GPU', 'CPU'];
const BLOCKS = 40;
/** Engine hash of block b, version v (each (block, version) its own hash: no two blocks share one). */
const eng = (b: number, v: number): bigint => 0x1_0000_0000n * BigInt(v + 1) + BigInt(b + 1000);

describe('engine-hash maps', () => {
  it('EngineMap keeps every key through growth and backward-shift deletion', () => {
    const m = new EngineMap(8);
    const keys: Array<[number, number]> = [];
    // Low halves repeat (every 1000th key shares one), so the high half read from the record decides.
    for (let i = 0; i < 3000; i++) keys.push([Math.imul(i % 1000, 0x9e3779b1), Math.floor(i / 1000)]);
    const eng = new Int32Array(keys.flat()); // record i carries keys[i]
    for (let i = 0; i < keys.length; i++) m.set(i, eng);
    expect(m.size).toBe(3000);
    for (let i = 0; i < 3000; i += 3) m.removeSlot(m.find(keys[i][0], keys[i][1], eng));
    const check = () =>
      keys.forEach(([lo, hi], i) => {
        const s = m.find(lo, hi, eng);
        if (i % 3 === 0) expect(s).toBe(-1);
        else expect(m.record(s)).toBe(i);
      });
    check();
    // Emptied to a quarter: it shrinks, and keeps every key.
    for (let i = 1; i < 3000; i += 3) if (i % 4 !== 1) m.removeSlot(m.find(keys[i][0], keys[i][1], eng));
    const bytes = m.byteLength;
    expect(m.shrink()).toBe(true);
    expect(m.byteLength).toBeLessThan(bytes / 2);
    keys.forEach(([lo, hi], i) => {
      const s = m.find(lo, hi, eng);
      if (i % 3 === 0 || (i % 3 === 1 && i % 4 !== 1)) expect(s).toBe(-1);
      else expect(m.record(s)).toBe(i);
    });
  });

  it('a map holding n hashes (a reservation) takes them without growing and keeps its room through sweeps', () => {
    const n = 1000;
    const m = EngineMap.holding(n);
    const bytes = m.byteLength;
    const eng = new Int32Array(2 * n);
    for (let i = 0; i < n; i++) {
      eng[2 * i] = Math.imul(i + 1, 0x9e3779b1);
      eng[2 * i + 1] = i;
    }
    for (let i = 0; i < n; i++) m.set(i, eng);
    expect(m.byteLength).toBe(bytes);
    for (let i = 0; i < n; i++) {
      expect(m.record(m.find(eng[2 * i], eng[2 * i + 1], eng))).toBe(i);
      expect(m.guess(eng[2 * i])).toBe(i);
    }
    for (let i = 0; i < n - 10; i++) m.removeSlot(m.find(eng[2 * i], eng[2 * i + 1], eng));
    expect(m.shrink()).toBe(false);
    expect(m.byteLength).toBe(bytes);
    m.set(0, eng);
    expect(m.size).toBe(11);
    // The default map grows from 64 rows and shrinks back to 8.
    const d = new EngineMap();
    for (let i = 0; i < n; i++) d.set(i, eng);
    expect(d.byteLength).toBeGreaterThan(bytes / 2);
    for (let i = 0; i < n; i++) d.removeSlot(d.find(eng[2 * i], eng[2 * i + 1], eng));
    expect(d.shrink()).toBe(true);
    expect(d.byteLength).toBe(8 * 8);
  });

  for (const seed of [1, 2, 3, 4]) {
    it(`resolve() answers the model after every write (seed ${seed})`, () => {
      const rnd = mulberry32(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
      const idx = new BlockIndex(16);
      // model: holder key "backend/medium" -> block -> engine hash carried (the latest store's)
      const model = new Map<string, Map<number, bigint>>();
      const version = new Map<string, number>(); // (backend, block) -> current engine version
      const holderOf = (backend: string, medium: Medium) => idx.holder(backend, 0, medium);
      for (let step = 0; step < 600; step++) {
        const backend = pick(BACKENDS);
        const medium = pick(MEDIA);
        const key = `${backend}/${medium}`;
        const held = model.get(key) ?? new Map<number, bigint>();
        model.set(key, held);
        const op = rnd();
        if (op < 0.55) {
          // store a chain of 1-6 blocks; sometimes the engine re-hashes the blocks (a new version)
          const start = Math.floor(rnd() * BLOCKS);
          const n = 1 + Math.floor(rnd() * 6);
          const bump = rnd() < 0.2;
          const seq: bigint[] = [];
          const engine: bigint[] = [];
          for (let b = start; b < Math.min(BLOCKS, start + n); b++) {
            const vk = `${backend}/${b}`;
            const v = (version.get(vk) ?? 0) + (bump ? 1 : 0);
            version.set(vk, v);
            seq.push(BigInt(b + 1));
            engine.push(eng(b, v));
            held.set(b, eng(b, v));
          }
          idx.store(holderOf(backend, medium), BigUint64Array.from(seq), BigUint64Array.from(engine));
        } else if (op < 0.85) {
          // the engine evicts blocks it holds, named by the hashes it stored them under
          const mine = [...held.entries()].filter(() => rnd() < 0.4);
          const removed = idx.remove(holderOf(backend, medium), BigUint64Array.from(mine.map(([, e]) => e)));
          expect(removed).toBe(mine.length);
          for (const [b] of mine) held.delete(b);
        } else if (op < 0.95) {
          idx.clearHolder(holderOf(backend, medium));
          held.clear();
        } else {
          idx.removeBackend(backend);
          for (const m of MEDIA) model.get(`${backend}/${m}`)?.clear();
        }
        // every engine hash ever used resolves to its block iff a record of the group carries it
        for (const be of BACKENDS) {
          const h = holderOf(be, 'GPU');
          for (let b = 0; b < BLOCKS; b++) {
            const top = version.get(`${be}/${b}`) ?? 0;
            for (let v = 0; v <= top; v++) {
              const e = eng(b, v);
              const carried = MEDIA.some((m) => model.get(`${be}/${m}`)?.get(b) === e);
              expect([step, be, b, v, idx.resolve(h, e)]).toEqual([step, be, b, v, carried ? BigInt(b + 1) : null]);
            }
          }
        }
      }
    });
  }
});
