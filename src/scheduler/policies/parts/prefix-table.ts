// AIBrix's prefix hash table (reimplemented from vllm-project/aibrix pkg/utils/prefixcacheindexer/
// hash.go and pkg/utils/lrustore/lru_store.go at e3e10f9): one LRU of block hashes for the pool
// (200,000 blocks), each block naming the pods the router sent it to; a block not written for 20
// minutes expires. Blocks are 4 symbols (AIBrix's default "character" tokenizer: 4 bytes of text),
// each hash chained on the previous. Reads do not refresh a block; writes do.
import { type HashSpace, seqHashes } from '../../../hashing/index.js';

export const AIBRIX_BLOCK = 4;
export const AIBRIX_BLOCKS = 200_000;
export const AIBRIX_TTL_MS = 20 * 60_000;

/** Complete blocks of 4 symbols, chained (a partial tail is not hashed). */
export function tableBlockHashes(symbols: Uint32Array, space: HashSpace): BigUint64Array {
  const n = Math.floor(symbols.length / AIBRIX_BLOCK) * AIBRIX_BLOCK;
  return n === 0 ? new BigUint64Array(0) : seqHashes(symbols.subarray(0, n), AIBRIX_BLOCK, space);
}

interface Entry {
  pods: Set<string>;
  writtenAt: number;
}

export class PrefixTable {
  /** Oldest write first (a write re-inserts). */
  private readonly blocks = new Map<bigint, Entry>();

  constructor(
    private readonly capacity = AIBRIX_BLOCKS,
    private readonly ttlMs = AIBRIX_TTL_MS,
  ) {}

  /**
   * Match percent per pod: block by block, the pods among `ready` still matching keep the percent
   * (i+1) x 100 / blocks (integer), the others drop out; the walk stops at a block none of them holds.
   */
  match(hashes: BigUint64Array, ready: Iterable<string>, now: number): Map<string, number> {
    this.expire(now);
    const alive = new Set(ready);
    const out = new Map<string, number>();
    for (let i = 0; i < hashes.length && alive.size > 0; i++) {
      const e = this.blocks.get(hashes[i]);
      if (!e || e.pods.size === 0) break;
      const pct = Math.floor(((i + 1) * 100) / hashes.length);
      let any = false;
      for (const p of [...alive]) {
        if (e.pods.has(p)) {
          out.set(p, pct);
          any = true;
        } else alive.delete(p);
      }
      if (!any) break;
    }
    return out;
  }

  /** The request went to `pod`: each of its blocks names the pod and becomes the newest. */
  add(hashes: BigUint64Array, pod: string, now: number): void {
    for (const h of hashes) {
      const e = this.blocks.get(h);
      if (e) this.blocks.delete(h);
      const entry = e ?? { pods: new Set<string>(), writtenAt: now };
      entry.pods.add(pod);
      entry.writtenAt = now;
      this.blocks.set(h, entry);
      if (this.blocks.size > this.capacity) this.blocks.delete(this.blocks.keys().next().value as bigint);
    }
  }

  removePod(match: (pod: string) => boolean): void {
    for (const [h, e] of this.blocks) {
      for (const p of e.pods) if (match(p)) e.pods.delete(p);
      if (e.pods.size === 0) this.blocks.delete(h);
    }
  }

  /** AIBrix sweeps every second; here each read sweeps what has expired by then (oldest writes first). */
  private expire(now: number): void {
    for (const [h, e] of this.blocks) {
      if (now - e.writtenAt <= this.ttlMs) break;
      this.blocks.delete(h);
    }
  }
}
