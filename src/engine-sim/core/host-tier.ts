// Host (CPU) tier: an LRU of block copies written back on GPU eviction. A block may sit on both
// tiers at once; loading it back to GPU keeps the host copy (it only refreshes its recency).
import type { BlockContent } from './block.js';
import { Lru } from './lru.js';

export class HostTier {
  private readonly lru = new Lru<bigint, BlockContent>();

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.lru.size;
  }

  get(hash: bigint): BlockContent | undefined {
    return this.lru.get(hash);
  }

  has(hash: bigint): boolean {
    return this.lru.has(hash);
  }

  /** Refresh recency of a block that is still here (never re-inserts an evicted one). */
  touch(content: BlockContent): void {
    if (this.lru.has(content.hash)) this.lru.push(content.hash, content);
  }

  /** Insert a copy; returns the blocks evicted to make room (oldest first). */
  store(content: BlockContent): BlockContent[] {
    const evicted: BlockContent[] = [];
    if (this.lru.has(content.hash)) {
      this.lru.push(content.hash, content);
      return evicted;
    }
    while (this.lru.size >= this.capacity) {
      const victim = this.lru.shift();
      if (!victim) break;
      evicted.push(victim[1]);
    }
    if (this.capacity > 0) this.lru.push(content.hash, content);
    return evicted;
  }

  values(): IterableIterator<BlockContent> {
    return this.lru.values();
  }

  clear(): void {
    this.lru.clear();
  }
}
