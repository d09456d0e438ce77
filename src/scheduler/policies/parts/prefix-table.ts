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
  readonly hash: bigint;
  pods: Set<string>;
  writtenAt: number;
  /** Write order: the next older and the next newer entry. */
  older: Entry | null;
  newer: Entry | null;
}

/**
 * The table's blocks in write order as an intrusive list beside the hash lookup. (A Map alone keeps
 * that order, but each rewrite and eviction leaves a deleted slot at its front that every later
 * `keys().next()` walks over until V8 rehashes: at 200,000 blocks that made routing 1,000 Mooncake
 * prompts take minutes.)
 */
export class PrefixTable {
  private readonly blocks = new Map<bigint, Entry>();
  private oldest: Entry | null = null;
  private newest: Entry | null = null;

  constructor(
    private readonly capacity = AIBRIX_BLOCKS,
    private readonly ttlMs = AIBRIX_TTL_MS,
  ) {}

  get size(): number {
    return this.blocks.size;
  }

  /**
   * Match percent per pod: block by block, the pods among `ready` still matching keep the percent
   * (i+1) x 100 / blocks (integer), the others drop out; the walk stops at a block none of them holds.
   */
  match(hashes: BigUint64Array, ready: Iterable<string>, now: number): Map<string, number> {
    this.expire(now);
    let alive = [...new Set(ready)];
    const out = new Map<string, number>();
    for (let i = 0; i < hashes.length && alive.length > 0; i++) {
      const e = this.blocks.get(hashes[i]);
      if (!e || e.pods.size === 0) break;
      const pct = Math.floor(((i + 1) * 100) / hashes.length);
      const still = alive.filter((p) => e.pods.has(p));
      for (const p of still) out.set(p, pct);
      alive = still;
    }
    return out;
  }

  /** The request went to `pod`: each of its blocks names the pod and becomes the newest. */
  add(hashes: BigUint64Array, pod: string, now: number): void {
    for (const h of hashes) {
      let e = this.blocks.get(h);
      if (e) this.unlink(e);
      else {
        e = { hash: h, pods: new Set<string>(), writtenAt: now, older: null, newer: null };
        this.blocks.set(h, e);
      }
      e.pods.add(pod);
      e.writtenAt = now;
      this.append(e);
      if (this.blocks.size > this.capacity) this.remove(this.oldest!);
    }
  }

  removePod(match: (pod: string) => boolean): void {
    for (const e of [...this.blocks.values()]) {
      for (const p of e.pods) if (match(p)) e.pods.delete(p);
      if (e.pods.size === 0) this.remove(e);
    }
  }

  /** Hashes oldest write first (for tests). */
  order(): bigint[] {
    const out: bigint[] = [];
    for (let e = this.oldest; e; e = e.newer) out.push(e.hash);
    return out;
  }

  /** AIBrix sweeps every second; here each read sweeps what has expired by then (oldest writes first). */
  private expire(now: number): void {
    while (this.oldest && now - this.oldest.writtenAt > this.ttlMs) this.remove(this.oldest);
  }

  private remove(e: Entry): void {
    this.blocks.delete(e.hash);
    this.unlink(e);
  }

  private append(e: Entry): void {
    e.older = this.newest;
    e.newer = null;
    if (this.newest) this.newest.newer = e;
    else this.oldest = e;
    this.newest = e;
  }

  private unlink(e: Entry): void {
    if (e.older) e.older.newer = e.newer;
    else this.oldest = e.newer;
    if (e.newer) e.newer.older = e.older;
    else this.newest = e.older;
    e.older = null;
    e.newer = null;
  }
}
