// Bounded LRU of segment text -> token ids, keyed by a 128-bit content hash (XXH3-128).
//
// The key is a hash rather than the text so the cache does not keep prompt text alive; at 128 bits a
// collision (the only way the cache could change ids) is not a practical concern. Bounded both in entries
// and in bytes, since one long system prompt can be worth thousands of short turns.
import { xxh3 } from '@node-rs/xxhash';

/** Rough per-entry overhead of a Map entry, bigint key and typed array header, in bytes. */
const ENTRY_OVERHEAD = 160;

export function segmentKey(text: string): bigint {
  return xxh3.xxh128(text);
}

export class SegmentCache {
  private readonly map = new Map<bigint, Uint32Array>();
  private bytes = 0;
  hits = 0;
  misses = 0;

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
  ) {}

  get size(): number {
    return this.map.size;
  }

  get byteSize(): number {
    return this.bytes;
  }

  /** Counts a hit or a miss; a hit becomes the most recently used entry. */
  get(key: bigint): Uint32Array | undefined {
    const ids = this.map.get(key);
    if (ids === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    this.map.delete(key);
    this.map.set(key, ids);
    return ids;
  }

  set(key: bigint, ids: Uint32Array): void {
    const cost = ids.byteLength + ENTRY_OVERHEAD;
    if (this.maxEntries <= 0 || cost > this.maxBytes) return;
    const old = this.map.get(key);
    if (old !== undefined) {
      this.bytes -= old.byteLength + ENTRY_OVERHEAD;
      this.map.delete(key);
    }
    this.map.set(key, ids);
    this.bytes += cost;
    while (this.map.size > this.maxEntries || this.bytes > this.maxBytes) {
      const [k, v] = this.map.entries().next().value as [bigint, Uint32Array];
      this.map.delete(k);
      this.bytes -= v.byteLength + ENTRY_OVERHEAD;
    }
  }

  clear(): void {
    this.map.clear();
    this.bytes = 0;
  }
}
