// The index's shortcuts change no answer: hot-block copies follow their blocks' lists, and a store's
// parent found by resolve() (resolvedRecord) is only a hint. Checked on the KV-event path (engine hashes, parents resolved through the engine map), with
// speculative bookings (crowded block 0, batched expire sweeps), withdrawals, removals by engine
// hash, clears, purges and compactions. Index a: as merged. Index b: never reads a copy, never
// uses resolvedRecord. Both get the same writes: rows, answers and copies must agree.
import { describe, expect, it } from 'vitest';
import { expectCopiesAreLists, type HotInternals } from '../helpers/hot-copies.js';
import { mulberry32 } from '../../src/common/prng.js';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { HB } from '../../src/indexer/hot-blocks.js';
import { NONE } from '../../src/indexer/layout.js';
import { RECORD_LAYOUT } from '../../src/indexer/records.js';

interface Internals extends HotInternals {
  resolvedRecord: number;
}

describe('index shortcuts: hot-block copies, findRecordOf, resolvedRecord and batched expiry sweeps', () => {
  it('KV-event path with parents, bookings, sweeps and compactions answers as the lists do', () => {
    for (let seed = 1; seed <= 3; seed++) {
      const rnd = mulberry32(seed);
      const a = new BlockIndex(32);
      const b = new BlockIndex(32);
      (b as unknown as Internals).hot.find = () => -1;
      {
        const ax = a as unknown as {
          findRecordOf(lo: number, hi: number, head: number, h: number): number;
          findRecord(head: number, h: number): number;
        };
        const orig = ax.findRecordOf.bind(ax);
        ax.findRecordOf = (lo, hi, head, h) => {
          const got = orig(lo, hi, head, h);
          const want = ax.findRecord(head, h);
          if (got !== want)
            throw new Error(
              `findRecordOf(${lo},${hi}, holder ${h}) = ${got}, list says ${want}; ${new Error().stack?.split('\n').slice(2, 5).join(' | ')}`,
            );
          return got;
        };
      }
      const prompt = new BigUint64Array(80).map(
        (_, i) => BigInt(seed) * 1_000_003n + BigInt(i + 1) * 0x9e3779b97f4a7c15n,
      );
      const eng = (inst: string) =>
        prompt.map((h) => (h ^ BigInt(inst.length * 7919 + inst.charCodeAt(inst.length - 1))) | 1n);
      const instances = Array.from({ length: 60 }, (_, i) => `i${i}`);
      let now = 0;
      let copies = 0;
      let resolvedHits = 0;
      const calls = { crowdedSweeps: 0, compactions: 0 };
      {
        const ax = a as unknown as Record<string, (...args: unknown[]) => unknown>;
        for (const [name, key] of [
          ['markCrowdedGone', 'crowdedSweeps'],
          ['compactRecords', 'compactions'],
        ] as const) {
          const orig = ax[name].bind(ax);
          ax[name] = (...args: unknown[]) => {
            const out = orig(...args);
            if (name !== 'markCrowdedGone' || out !== null) calls[key]++;
            return out;
          };
        }
      }
      for (let step = 0; step < 700; step++) {
        now += 1;
        const inst = instances[Math.floor(rnd() * instances.length)];
        const op = rnd();
        const seen: number[] = [];
        for (const x of [a, b]) {
          const r2 = mulberry32(seed * 100_000 + step);
          const e = eng(inst);
          if (op < 0.45) {
            // KV event: blocks [from, to) with parent (engine hash) resolved first, as apply.ts does.
            const medium = r2() < 0.8 ? 'GPU' : 'CPU';
            const h = x.holder(inst, 0, medium);
            const from = op < 0.1 ? 0 : Math.floor(r2() * 40);
            const to = Math.min(prompt.length, from + 1 + Math.floor(r2() * 30));
            let parent: bigint | null = null;
            if (from > 0) parent = x.resolve(h, e[from - 1]);
            if (x === b) (b as unknown as Internals).resolvedRecord = NONE;
            else seen.push((a as unknown as Internals).resolvedRecord);
            if (from > 0 && parent === null) continue;
            x.store(h, prompt.subarray(from, to), e.subarray(from, to), 0, parent);
          } else if (op < 0.6) {
            const ins = x.speculate(
              inst,
              0,
              prompt.subarray(0, 1 + Math.floor(r2() * 40)),
              30 + Math.floor(r2() * 2) * 20,
              now,
            );
            if (r2() < 0.3) x.withdrawSpeculative(inst, 0, prompt.subarray(0, 1 + Math.floor(r2() * 40)), ins, now);
          } else if (op < 0.7) {
            const at = Math.floor(r2() * 40);
            x.remove(x.holder(inst, 0, 'GPU'), e.subarray(at, at + 1 + Math.floor(r2() * 6)));
          } else if (op < 0.71) x.clearBackend(inst, 0);
          else if (op < 0.715) x.removeInstance(inst);
          else if (op < 0.85) x.expire(now - 5);
          if (step % 300 === 299) {
            // Most holders go, then a sweep: the record rows are compacted (renumbered).
            for (const i of instances.slice(0, 40)) x.clearBackend(i, 0);
            x.expire(now + 1000);
          }
        }
        if (seen[0] !== undefined && seen[0] !== NONE) resolvedHits++;
        copies += expectCopiesAreLists(a);
        expect((a as unknown as Internals).rec).toEqual((b as unknown as Internals).rec);
        expect(a.query(prompt, now)).toEqual(b.query(prompt, now));
        const cands = instances.map((instance) => ({ instance, dpRank: 0 }));
        const alloc = Int32Array.from(cands, (_, i) => (i % 3 === 0 ? 5 : 0));
        const rows = (x: BlockIndex) => x as unknown as { recTouch: Float64Array; runTouchEnd: Int32Array };
        expect(rows(a).recTouch, `recTouch seed ${seed} step ${step}`).toEqual(rows(b).recTouch);
        expect(rows(a).runTouchEnd, `runTouchEnd seed ${seed} step ${step}`).toEqual(rows(b).runTouchEnd);
        expect(a.overlapsFor(prompt, now, cands, alloc), `overlaps seed ${seed} step ${step} op ${op}`).toEqual(
          b.overlapsFor(prompt, now, cands, alloc),
        );
        const touched = instances[Math.floor(rnd() * instances.length)];
        const depth = 1 + Math.floor(rnd() * 60);
        for (const x of [a, b]) x.touch(touched, 0, prompt, depth);
      }
      // Each shortcut was exercised: copies read, parents resolved, crowded sweeps and compactions run.
      expect(calls.crowdedSweeps).toBeGreaterThan(0);
      expect(calls.compactions).toBeGreaterThan(0);
      expect(copies).toBeGreaterThan(50);
      expect(resolvedHits).toBeGreaterThan(10);
    }
  });
});
