// Property test: random event sequences applied to BlockIndex and to a deliberately simple
// reference model must give identical query answers at every step.
import { describe, expect, it } from 'vitest';
import { BlockIndex } from '../../src/indexer/block-index.js';
import type { Medium } from '../../src/indexer/tiers.js';
import { mulberry32 } from '../../src/common/prng.js';

const prng = mulberry32;

const MEDIA: Medium[] = ['GPU', 'CPU', 'DISK'];
const BACKENDS = ['a', 'b', 'c', 'pool'];
const ENGINE_XOR = 0xdead_beef_0000_0000n;
const usesEngineHashes = (b: string) => b === 'a' || b === 'c';

interface RefBlock {
  expiry: number;
}
class Reference {
  // holderKey -> router hash -> block
  holders = new Map<string, Map<bigint, RefBlock>>();
  key(b: string, r: number, m: Medium | 'SPEC') {
    return `${b}|${r}|${m}`;
  }
  store(k: string, hashes: bigint[], expiry: number, instance: string | null, rank: number) {
    let m = this.holders.get(k);
    if (!m) this.holders.set(k, (m = new Map()));
    for (const h of hashes) {
      m.set(h, { expiry });
      if (!k.endsWith('SPEC') && instance !== null) this.holders.get(this.key(instance, rank, 'SPEC'))?.delete(h);
    }
  }
  remove(k: string, hashes: bigint[]) {
    const m = this.holders.get(k);
    if (m) for (const h of hashes) m.delete(h);
  }
  query(q: bigint[], now: number) {
    const out: Record<string, number[]> = {};
    const owners = new Set<string>();
    for (const k of this.holders.keys()) {
      const [b, r] = k.split('|');
      if (b !== 'pool') owners.add(`${b}|${r}`);
    }
    let shared = 0;
    for (const h of q) {
      if (this.holders.get(this.key('pool', 0, 'CPU'))?.has(h)) shared++;
      else break;
    }
    for (const o of owners) {
      const [b, r] = o.split('|');
      const has = (m: Medium | 'SPEC', h: bigint) => {
        const blk = this.holders.get(`${b}|${r}|${m}`)?.get(h);
        return blk !== undefined && (blk.expiry === 0 || blk.expiry > now);
      };
      const lvl = (ms: Array<Medium | 'SPEC'>) => {
        let n = 0;
        for (const h of q) {
          if (ms.some((m) => has(m, h))) n++;
          else break;
        }
        return n;
      };
      const d = lvl(['GPU', 'SPEC', 'CPU', 'DISK']);
      if (d > 0) out[`${b}/${r}`] = [lvl(['GPU', 'SPEC']), lvl(['GPU', 'SPEC', 'CPU']), d];
    }
    return { out, shared };
  }
}

describe('BlockIndex equals a reference model on random event sequences', () => {
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`seed ${seed}`, () => {
      const rnd = prng(seed);
      const pick = <T>(xs: T[]) => xs[Math.floor(rnd() * xs.length)];
      // Prompts share prefixes: hash of a block = id along one of a few branching paths.
      const prompts: bigint[][] = [];
      for (let p = 0; p < 6; p++) {
        const base = p < 3 ? [] : prompts[p - 3].slice(0, 1 + Math.floor(rnd() * 4));
        const rest = Array.from({ length: 8 - base.length }, (_, i) => BigInt(1000 * (p + 1) + i) + (1n << 63n));
        prompts.push([...base, ...rest]);
      }
      const idx = new BlockIndex(4);
      idx.bindBackend('pool', null);
      const ref = new Reference();
      let now = 0;
      for (let step = 0; step < 1500; step++) {
        const op = rnd();
        const prompt = pick(prompts);
        const from = Math.floor(rnd() * prompt.length);
        const to = Math.min(prompt.length, from + 1 + Math.floor(rnd() * 4));
        const slice = prompt.slice(from, to);
        if (op < 0.4) {
          const b = pick(BACKENDS);
          const r = b === 'pool' ? 0 : Math.floor(rnd() * 2);
          const m: Medium = b === 'pool' ? 'CPU' : pick(MEDIA);
          const h = idx.holder(b, r, m);
          const eng = usesEngineHashes(b) ? BigUint64Array.from(slice.map((x) => x ^ ENGINE_XOR)) : null;
          idx.store(h, BigUint64Array.from(slice), eng);
          ref.store(ref.key(b, r, m), slice, 0, b === 'pool' ? null : b, r);
        } else if (op < 0.65) {
          const b = pick(BACKENDS);
          const r = b === 'pool' ? 0 : Math.floor(rnd() * 2);
          const m: Medium = b === 'pool' ? 'CPU' : pick(MEDIA);
          const names = usesEngineHashes(b) ? slice.map((x) => x ^ ENGINE_XOR) : slice;
          idx.remove(idx.holder(b, r, m), BigUint64Array.from(names));
          ref.remove(ref.key(b, r, m), slice);
        } else if (op < 0.8) {
          const b = pick(['a', 'b', 'c']);
          const r = Math.floor(rnd() * 2);
          const exp = now + 1 + Math.floor(rnd() * 50);
          idx.store(idx.speculativeHolder(b, r, 50), BigUint64Array.from(slice), null, exp);
          ref.store(ref.key(b, r, 'SPEC'), slice, exp, null, r);
        } else if (op < 0.83) {
          const b = pick(['a', 'b', 'c']);
          const r = Math.floor(rnd() * 2);
          const m = pick(MEDIA);
          idx.clearHolder(idx.holder(b, r, m));
          ref.holders.delete(ref.key(b, r, m));
        } else if (op < 0.85) {
          const b = pick(['a', 'b', 'c']);
          idx.removeInstance(b);
          for (const k of [...ref.holders.keys()]) if (k.startsWith(`${b}|`)) ref.holders.delete(k);
        } else if (op < 0.9) {
          now += Math.floor(rnd() * 20);
          if (rnd() < 0.5) idx.expire(now);
        } else {
          // query only
        }
        const q = pick(prompts).slice(0, 1 + Math.floor(rnd() * 8));
        const got = idx.query(BigUint64Array.from(q), now);
        const want = ref.query(q, now);
        const gotMap = Object.fromEntries(
          got.candidates.map((c) => [`${c.instance}/${c.dpRank}`, [c.device, c.host, c.disk]]),
        );
        expect({ step, out: gotMap, shared: got.sharedBlocks }).toEqual({ step, out: want.out, shared: want.shared });
      }
      // Everything removed -> the index is empty.
      for (const b of ['a', 'b', 'c']) idx.removeInstance(b);
      idx.removeBackend('pool');
      expect(idx.stats()).toMatchObject({ blocks: 0, records: 0 });
    });
  }
});
