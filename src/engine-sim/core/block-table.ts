// The KV cache's committed GPU blocks by engine hash: open addressing (linear probing, backward-shift
// deletion) over the hash's 30-bit key (blockKey), the keys in one Int32Array. It never grows: it
// holds at most the pool's blocks, at most 0.7 full. A Map keyed by the bigint hash called into the
// runtime to hash each key and read every probed key's object to compare, and a Map's churn
// (a fleet's engines commit and evict blocks by the tens of millions) rebuilt its table every few
// thousand commits, a large garbage array each time. Keys are not unique: a lookup checks the
// hash of each block whose key matches.
import type { BlockContent, GpuBlock } from './block.js';

/** Most of its rows a table fills. */
const MAX_LOAD = 0.7;

export class BlockTable {
  /** Row i holds key + 1 (0: empty), its block in `blocks[i]`. */
  private readonly keys: Int32Array;
  private readonly blocks: (GpuBlock | null)[];
  private readonly mask: number;
  private count = 0;

  constructor(readonly maxBlocks: number) {
    let rows = 16;
    while (rows * MAX_LOAD < maxBlocks) rows *= 2;
    this.keys = new Int32Array(rows);
    this.blocks = new Array<GpuBlock | null>(rows).fill(null);
    this.mask = rows - 1;
  }

  get size(): number {
    return this.count;
  }

  /** The block of `hash` (its key `key`), if held. */
  find(key: number, hash: bigint): GpuBlock | undefined {
    const K = this.keys;
    const want = key + 1;
    for (let i = key & this.mask; ; i = (i + 1) & this.mask) {
      const k = K[i];
      if (k === 0) return undefined;
      if (k === want) {
        const b = this.blocks[i] as GpuBlock;
        if ((b.content as BlockContent).hash === hash) return b;
      }
    }
  }

  /** Hold `block` under `key` (its content's; the caller knows its hash is not held). */
  add(key: number, block: GpuBlock): void {
    if (this.count >= this.maxBlocks) throw new RangeError(`BlockTable: more than ${this.maxBlocks} blocks`);
    const K = this.keys;
    let i = key & this.mask;
    while (K[i] !== 0) i = (i + 1) & this.mask;
    K[i] = key + 1;
    this.blocks[i] = block;
    this.count++;
  }

  /** Let go of `block` (held under `key`). */
  remove(key: number, block: GpuBlock): void {
    const K = this.keys;
    const B = this.blocks;
    const mask = this.mask;
    let i = key & mask;
    while (B[i] !== block) {
      if (K[i] === 0) throw new Error('BlockTable: block not held');
      i = (i + 1) & mask;
    }
    // Backward shift: each later row of the probe run moves into the hole unless its home lies
    // cyclically in (hole, row].
    for (let j = (i + 1) & mask; K[j] !== 0; j = (j + 1) & mask) {
      const home = (K[j] - 1) & mask;
      const stays = i <= j ? home > i && home <= j : home > i || home <= j;
      if (stays) continue;
      K[i] = K[j];
      B[i] = B[j];
      i = j;
    }
    K[i] = 0;
    B[i] = null;
    this.count--;
  }

  clear(): void {
    this.keys.fill(0);
    this.blocks.fill(null);
    this.count = 0;
  }

  /** The held blocks, in no particular order. */
  *values(): IterableIterator<GpuBlock> {
    for (let i = 0; i < this.blocks.length; i++) {
      const b = this.blocks[i];
      if (b !== null) yield b;
    }
  }
}
